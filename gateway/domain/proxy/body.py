"""What the gateway needs to know about an API request body before it forwards it.

The body is forwarded as the client sent it except for one change: a stream always asks
the worker for the usage chunk (``stream_options.include_usage``), so the gateway can
account tokens; whether the client sees that chunk is the client's choice.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.domain.proxy.openai_errors import ApiError

# Reserved for a request without max_tokens when the worker's context length is unknown.
DEFAULT_COMPLETION_RESERVATION = 4096
# How much of the prompt decides which worker's prefix cache a request goes to.
AFFINITY_CHARS = 2048
# Bounds on what the gateway multiplies into a token reservation: OpenAI's own cap on n, and
# a max_tokens far past any context length (the worker refuses what its model cannot do).
MAX_N = 128
MAX_TOKENS = 2**31 - 1


@dataclass(slots=True)
class ApiRequest:
    endpoint: str  # "chat.completions" | "completions"
    body: dict[str, Any]
    model: str
    stream: bool
    client_wants_usage: bool
    n: int
    max_tokens: int | None

    def upstream_body(self) -> bytes:
        if not self.stream:
            return msgspec.json.encode(self.body)
        options = dict(self.body.get("stream_options") or {})
        options["include_usage"] = True
        return msgspec.json.encode({**self.body, "stream_options": options})

    def prompt_text(self) -> str:
        if self.endpoint == "chat.completions":
            return "\n".join(_message_text(m) for m in self.body.get("messages", []))
        prompt = self.body.get("prompt", "")
        if isinstance(prompt, list):
            if prompt and all(_is_token(p) for p in prompt):
                prompt = [prompt]  # one prompt of token ids, counted like a list of them
            return "\n".join(p if isinstance(p, str) else " " * len(p) * 4 for p in prompt)
        return str(prompt)

    def estimated_prompt_tokens(self) -> int:
        """An upper-ish estimate (about 3 bytes a token); settlement uses the real count."""
        prompt = self.body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return len(prompt)
        return len(self.prompt_text().encode()) // 3 + 8

    def reserved_tokens(self, context_len: int | None) -> int:
        prompt = self.estimated_prompt_tokens()
        if self.max_tokens is not None:
            completion = self.max_tokens
        elif context_len:
            completion = max(context_len - prompt, 1)
        else:
            completion = DEFAULT_COMPLETION_RESERVATION
        return prompt + completion * self.n

    def affinity_key(self) -> str:
        """Requests that start alike (same system prompt) share a key, hence a worker."""
        if self.endpoint == "chat.completions":
            messages = self.body.get("messages", [])
            first = messages[0] if messages else {}
            text = _message_text(first) if isinstance(first, dict) else ""
        else:
            text = self.prompt_text()
        return hashlib.blake2b(text[:AFFINITY_CHARS].encode(), digest_size=16).hexdigest()


def parse(endpoint: str, raw: bytes) -> ApiRequest:
    """Checks what the gateway relies on; the worker validates everything else."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ApiError(
            400, f"the request body is not valid JSON: {exc}", reason="bad_request"
        ) from None
    except RecursionError:  # msgspec's answer to a body nested ~1000 levels deep
        raise ApiError(400, "the request body is nested too deeply", reason="bad_request") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", reason="bad_request")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(
            400, "model is required and must be a string", param="model", reason="bad_request"
        )
    required = "messages" if endpoint == "chat.completions" else "prompt"
    if required not in body:
        raise ApiError(400, f"{required} is required", param=required, reason="bad_request")
    # The gateway reads these itself (affinity, token estimate): their shape must hold.
    if endpoint == "chat.completions":
        _check_messages(body["messages"])
    else:
        _check_prompt(body["prompt"])
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be a boolean", param="stream", reason="bad_request")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(
            400, "stream_options must be an object", param="stream_options", reason="bad_request"
        )
    n = _positive_int(body, "n", 1, MAX_N)
    limit_name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _positive_int(body, limit_name, None, MAX_TOKENS)
    wants_usage = bool(stream and options and options.get("include_usage"))
    return ApiRequest(endpoint, body, model, stream, wants_usage, n or 1, max_tokens)


def _positive_int(body: dict[str, Any], name: str, default: int | None, maximum: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise ApiError(
            400,
            f"{name} must be an integer between 1 and {maximum}",
            param=name,
            reason="bad_request",
        )
    return value


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ApiError(
            400, "messages must be an array of objects", param="messages", reason="bad_request"
        )


def _check_prompt(prompt: Any) -> None:
    """OpenAI's four shapes: a string, strings, token ids, or lists of token ids."""
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and (
        all(isinstance(p, str) for p in prompt)
        or all(_is_token(p) for p in prompt)
        or all(isinstance(p, list) and all(_is_token(t) for t in p) for p in prompt)
    ):
        return
    raise ApiError(
        400,
        "prompt must be a string, an array of strings, an array of token ids,"
        " or an array of arrays of token ids",
        param="prompt",
        reason="bad_request",
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (p.get("text") for p in content if isinstance(p, dict))
        return "".join(t for t in texts if isinstance(t, str))
    return ""
