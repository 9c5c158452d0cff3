"""The engine's TokenLogprobs in the two shapes OpenAI uses: chat and legacy completions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from inference.sampling.logprobs import TokenLogprobs
from inference.server.protocol import (
    ChatLogprobs,
    ChatTokenLogprob,
    CompletionLogprobs,
    TopLogprob,
)

# JSON has no -inf; OpenAI reports impossible tokens as -9999.
_FLOOR = -9999.0


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


def token_text(tokenizer: Decoder, token_id: int) -> str:
    # Special tokens are shown, not dropped: a logprob entry must name the token it is for.
    return tokenizer.decode([token_id], skip_special_tokens=False)


def _clamp(logprob: float) -> float:
    return logprob if logprob > _FLOOR else _FLOOR


def chat_logprobs(tokenizer: Decoder, entries: Sequence[TokenLogprobs]) -> ChatLogprobs:
    content = []
    for entry in entries:
        text = token_text(tokenizer, entry.token_id)
        top = []
        for token_id, logprob in entry.top:
            alt = token_text(tokenizer, token_id)
            top.append(TopLogprob(token=alt, logprob=_clamp(logprob), bytes=list(alt.encode())))
        content.append(
            ChatTokenLogprob(
                token=text,
                logprob=_clamp(entry.logprob),
                bytes=list(text.encode()),
                top_logprobs=top,
            )
        )
    return ChatLogprobs(content=content)


def completion_logprobs(
    tokenizer: Decoder, entries: Sequence[TokenLogprobs], text_offset: int = 0
) -> CompletionLogprobs:
    """``text_offset`` is where the first entry's token starts in the choice's text."""
    tokens: list[str] = []
    token_logprobs: list[float] = []
    top_logprobs: list[dict[str, float]] = []
    offsets: list[int] = []
    for entry in entries:
        text = token_text(tokenizer, entry.token_id)
        tokens.append(text)
        token_logprobs.append(_clamp(entry.logprob))
        top_logprobs.append({token_text(tokenizer, tid): _clamp(lp) for tid, lp in entry.top})
        offsets.append(text_offset)
        text_offset += len(text)
    return CompletionLogprobs(
        tokens=tokens,
        token_logprobs=token_logprobs,
        top_logprobs=top_logprobs,
        text_offset=offsets,
    )
