"""What the engine hands back: vLLM-shaped request and completion outputs."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.sampling.sampler import TokenLogprobs


@dataclass(slots=True)
class CompletionOutput:
    """One of a request's ``n`` samples."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[TokenLogprobs] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "abort"; None while running
    stop_reason: str | int | None = None  # the stop string or token id that ended it

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = False
    num_cached_tokens: int = 0
    prompt_logprobs: list[TokenLogprobs | None] | None = None
    metrics: dict[str, float] = field(default_factory=dict)
