"""The request fields the gateway's token reservation is computed from, checked up front.

A reservation multiplies them (prompts x n x max_tokens), so each must be a real integer
within the range a worker accepts: one huge ``n`` would otherwise reserve more tokens than
any counter can hold. Anything outside is a 400 naming the field, as OpenAI answers.
"""

from __future__ import annotations

from typing import Any

from gateway.domain.proxy.openai_errors import ApiError

# The worker's own ceiling for n (inference/server/validation.py MAX_N), and best_of alike.
MAX_SEQUENCES = 128
# The largest max_tokens any model could use: a context length is an int32 in every engine.
MAX_COMPLETION_TOKENS = 2**31 - 1
# Prompts in one /v1/completions batch: a batch is many requests in one, so it is bounded.
MAX_PROMPTS = 2048

_RANGES = {
    "n": MAX_SEQUENCES,
    "best_of": MAX_SEQUENCES,
    "max_tokens": MAX_COMPLETION_TOKENS,
    "max_completion_tokens": MAX_COMPLETION_TOKENS,
}

# One prompt of a /v1/completions batch: text, or token ids.
Prompt = str | list[int]


def count_param(body: dict[str, Any], name: str) -> int | None:
    """``body[name]`` as an int in 1.._RANGES[name]; None when absent or null."""
    value = body.get(name)
    if value is None:
        return None
    high = _RANGES[name]
    # JSON has no integer type of its own: 2.0 and 1e20 arrive as floats, and true as a
    # bool, which Python counts as an int.
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ApiError(
            400,
            f"{name} must be an integer from 1 to {high}, got {_shown(value)}",
            param=name,
            reason="bad_request",
        )
    return value


def prompts_of(prompt: Any) -> tuple[Prompt, ...]:
    """The prompts of a /v1/completions request, one per sequence group the worker runs.

    ``prompt`` is a string, a list of strings, a list of token ids (one prompt) or a list
    of token-id lists (several); the worker takes strings and id lists mixed, and so do we.
    """
    if isinstance(prompt, str):
        return (prompt,)
    if not isinstance(prompt, list) or not prompt:
        raise _bad_prompt("prompt must be a string or a non-empty list")
    if all(_is_token(t) for t in prompt):
        return (prompt,)
    if len(prompt) > MAX_PROMPTS:
        raise _bad_prompt(f"prompt may hold at most {MAX_PROMPTS} prompts, got {len(prompt)}")
    for item in prompt:
        if not isinstance(item, str) and not (
            isinstance(item, list) and all(_is_token(t) for t in item)
        ):
            raise _bad_prompt(
                "prompt must be a string, a list of strings, a list of token ids "
                "or a list of token-id lists"
            )
    return tuple(prompt)


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bad_prompt(message: str) -> ApiError:
    return ApiError(400, message, param="prompt", reason="bad_request")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
