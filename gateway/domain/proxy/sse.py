"""Server-sent events from a worker, passed through event by event while usage is read off.

The gateway always asks for the usage chunk; when the client did not, that chunk and the
``"usage":null`` the worker then puts on every other chunk are taken out again, so the
client sees exactly what it asked for.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

_NULL_USAGE = b',"usage":null'
_DONE = b"data: [DONE]"


@dataclass(slots=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @classmethod
    def of(cls, usage: Any) -> Usage | None:
        if not isinstance(usage, dict):
            return None
        details = usage.get("prompt_tokens_details") or {}
        return cls(
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
        )


@dataclass(slots=True)
class StreamTap:
    client_wants_usage: bool
    capture: bool = False  # keep the generated text for the audit record
    usage: Usage | None = None
    first_token_at: float | None = None
    chunks: int = 0
    error: str = ""
    done: bool = False
    text: list[str] = field(default_factory=list)
    _pending: bytes = b""

    def feed(self, data: bytes) -> bytes:
        """Complete events of ``data`` (plus what was pending) to forward to the client."""
        buffer = self._pending + data
        end = buffer.rfind(b"\n\n")
        if end < 0:
            self._pending = buffer
            return b""
        self._pending = buffer[end + 2 :]
        out = [self._event(event) for event in buffer[:end].split(b"\n\n") if event]
        return b"".join(out)

    def _event(self, event: bytes) -> bytes:
        if event.startswith(_DONE):
            self.done = True
            return event + b"\n\n"
        if b'"usage":{' in event and b'"choices":[]' in event:
            self.usage = Usage.of(_data(event).get("usage"))
            return event + b"\n\n" if self.client_wants_usage else b""
        if event.startswith(b'data: {"error"'):
            error = _data(event).get("error") or {}
            self.error = str(error.get("message", "error")) if isinstance(error, dict) else "error"
            return event + b"\n\n"
        self.chunks += 1
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        if self.capture:
            self._keep_text(event)
        if not self.client_wants_usage and event.endswith(_NULL_USAGE + b"}"):
            event = event[: -len(_NULL_USAGE) - 1] + b"}"
        return event + b"\n\n"

    def _keep_text(self, event: bytes) -> None:
        for choice in _data(event).get("choices") or []:
            if isinstance(choice, dict):
                delta = choice.get("delta") or {}
                piece = delta.get("content") if isinstance(delta, dict) else None
                piece = piece if piece is not None else choice.get("text")
                if isinstance(piece, str):
                    self.text.append(piece)
                if isinstance(delta, dict) and isinstance(delta.get("tool_calls"), list):
                    self._keep_calls(delta["tool_calls"])

    def _keep_calls(self, calls: list[Any]) -> None:
        """Tool calls are the reply too: each kept as ``[tool_call NAME] ARGUMENTS`` on its
        own line (the first delta names the call, the later ones carry its arguments)."""
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            name = function.get("name")
            if isinstance(name, str):
                self.text.append(f"\n[tool_call {name}] ")
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                self.text.append(arguments)


def _data(event: bytes) -> dict[str, Any]:
    payload = event.partition(b"data: ")[2]
    try:
        decoded = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}
