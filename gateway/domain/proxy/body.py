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
from gateway.domain.proxy.request_params import Prompt, count_param, prompts_of

# Reserved for a request without max_tokens when the worker's context length is unknown.
DEFAULT_COMPLETION_RESERVATION = 4096
# How much of the prompt decides which worker's prefix cache a request goes to.
AFFINITY_CHARS = 2048


@dataclass(slots=True)
class ApiRequest:
    endpoint: str  # "chat.completions" | "completions"
    body: dict[str, Any]
    model: str
    stream: bool
    client_wants_usage: bool
    n: int  # sequences generated per prompt: the larger of n and best_of
    max_tokens: int | None  # the completion limit the worker applies, if the client set one
    # /v1/completions: one entry per prompt of a batch; chat: empty (its prompt is messages).
    prompts: tuple[Prompt, ...] = ()

    def upstream_body(self) -> bytes:
        if not self.stream:
            return msgspec.json.encode(self.body)
        options = dict(self.body.get("stream_options") or {})
        options["include_usage"] = True
        return msgspec.json.encode({**self.body, "stream_options": options})

    def prompt_text(self) -> str:
        if self.endpoint == "chat.completions":
            texts = [_message_text(m) for m in self.body.get("messages", [])]
            tools = self.body.get("tools")
            if isinstance(tools, list) and self.body.get("tool_choice") != "none":
                texts.append(msgspec.json.encode(tools).decode())  # the template renders them
            return "\n".join(texts)
        return "\n".join(p if isinstance(p, str) else " " * len(p) * 4 for p in self.prompts)

    def prompt_estimates(self) -> list[int]:
        """Tokens per prompt: exact for token ids, else an upper-ish guess (about 3 bytes
        a token); settlement uses the worker's real count."""
        if self.endpoint == "chat.completions":
            return [_text_estimate(self.prompt_text())]
        return [_text_estimate(p) if isinstance(p, str) else len(p) for p in self.prompts]

    def estimated_prompt_tokens(self) -> int:
        return sum(self.prompt_estimates())

    def reserved_tokens(self, context_len: int | None) -> int:
        """The request's worst case: every prompt, plus ``n`` completions of each.

        No sequence can outgrow the model's context, so that bounds the completion part
        when the worker reported it; without max_tokens a sequence may fill the context.
        """
        total = 0
        for prompt in self.prompt_estimates():
            if self.max_tokens is not None:
                completion = min(self.max_tokens, context_len or self.max_tokens)
            elif context_len:
                completion = max(context_len - prompt, 1)
            else:
                completion = DEFAULT_COMPLETION_RESERVATION
            total += prompt + completion * self.n
        return total

    def affinity_key(self) -> str:
        """Requests that start alike (same system prompt) share a key, hence a worker."""
        if self.endpoint == "chat.completions":
            return chat_affinity_key(self.body.get("messages", []))
        return _affinity_of(self.prompt_text())


def chat_affinity_key(messages: list[Any]) -> str:
    """The affinity key of a chat: its first message decides. The prefix warmer computes
    an assistant's key with this too, so its pin lands where the assistant's requests go."""
    first = messages[0] if messages else {}
    return _affinity_of(_message_text(first) if isinstance(first, dict) else "")


def _affinity_of(text: str) -> str:
    return hashlib.blake2b(text[:AFFINITY_CHARS].encode(), digest_size=16).hexdigest()


def parse(endpoint: str, raw: bytes) -> ApiRequest:
    """Checks what the gateway relies on (what it forwards to and what it reserves); the
    worker validates everything else."""
    try:
        body = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ApiError(
            400, f"the request body is not valid JSON: {exc}", reason="bad_request"
        ) from None
    except RecursionError:  # msgspec's answer to a body nested ~1000 levels deep
        raise ApiError(400, "the request body is nested too deeply", reason="bad_request") from None
    return parse_body(endpoint, body)


def parse_body(endpoint: str, body: Any) -> ApiRequest:
    """`parse` for a decoded body (the proxy re-reads one it rewrote for an assistant)."""
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
    # The gateway reads messages itself (affinity, token estimate): their shape must hold.
    # The prompt's shapes are checked by prompts_of below.
    if endpoint == "chat.completions":
        _check_messages(body["messages"])
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise ApiError(400, "stream must be a boolean", param="stream", reason="bad_request")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise ApiError(
            400, "stream_options must be an object", param="stream_options", reason="bad_request"
        )
    n = count_param(body, "n") or 1
    best_of = count_param(body, "best_of") or n
    # Both are checked when given; the one the worker obeys is reserved for. The legacy
    # endpoint knows only max_tokens, chat prefers max_completion_tokens (as vLLM does).
    max_tokens = count_param(body, "max_tokens")
    max_completion_tokens = count_param(body, "max_completion_tokens")
    if endpoint == "chat.completions" and max_completion_tokens is not None:
        max_tokens = max_completion_tokens
    prompts = () if endpoint == "chat.completions" else prompts_of(body["prompt"])
    wants_usage = bool(stream and options and options.get("include_usage"))
    return ApiRequest(
        endpoint, body, model, stream, wants_usage, max(n, best_of), max_tokens, prompts
    )


def _text_estimate(text: str) -> int:
    return len(text.encode()) // 3 + 8


def _check_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise ApiError(
            400, "messages must be an array of objects", param="messages", reason="bad_request"
        )


def _message_text(message: Any) -> str:
    if not isinstance(message, dict):
        return ""
    calls = message.get("tool_calls")
    if isinstance(calls, list) and calls:  # an assistant's calls are rendered as JSON
        return msgspec.json.encode(calls).decode() + _content_text(message)
    return _content_text(message)


def _content_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = (p.get("text") for p in content if isinstance(p, dict))
        return "".join(t for t in texts if isinstance(t, str))
    return ""
