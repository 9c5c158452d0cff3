"""SamplingParams: how one request is sampled and when it stops (vLLM's names)."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.grammar.spec import Constraint


@dataclass(slots=True)
class SamplingParams:
    """Per-request sampling settings. Invalid values raise ValueError naming the field.

    ``temperature == 0`` is greedy. ``top_k`` of 0 or -1 disables top-k. ``stop`` strings
    are not included in the output text. ``logprobs`` / ``prompt_logprobs`` ask for the
    chosen token's log-probability plus that many top alternatives. ``constraint`` limits
    every sampled token to those its grammar allows, and ends the sample (finish reason
    "stop") once the grammar is complete. ``speculative=False`` keeps this request out of
    speculative decoding (its output is the same either way; a constrained request never
    speculates).
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None
    max_tokens: int | None = 16  # None: up to max_model_len
    min_tokens: int = 0
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    # Speculative decoding for this request, when the engine has it on (False: never).
    speculative: bool = True
    # Structured output: the text must match this (a JSON schema, regex, choice, grammar).
    constraint: Constraint | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = list(self.stop)
        self.stop_token_ids = list(self.stop_token_ids)
        _check(self.n >= 1, "n", "must be at least 1", self.n)
        _check(self.temperature >= 0, "temperature", "must be non-negative", self.temperature)
        _check(0 < self.top_p <= 1, "top_p", "must be in (0, 1]", self.top_p)
        _check(self.top_k >= -1, "top_k", "must be -1 or 0 (disabled) or positive", self.top_k)
        _check(0 <= self.min_p <= 1, "min_p", "must be in [0, 1]", self.min_p)
        _check(
            -2 <= self.presence_penalty <= 2,
            "presence_penalty",
            "must be in [-2, 2]",
            self.presence_penalty,
        )
        _check(
            -2 <= self.frequency_penalty <= 2,
            "frequency_penalty",
            "must be in [-2, 2]",
            self.frequency_penalty,
        )
        _check(
            self.repetition_penalty > 0,
            "repetition_penalty",
            "must be positive",
            self.repetition_penalty,
        )
        if self.max_tokens is not None:
            _check(self.max_tokens >= 1, "max_tokens", "must be at least 1", self.max_tokens)
        _check(self.min_tokens >= 0, "min_tokens", "must be non-negative", self.min_tokens)
        if self.max_tokens is not None:
            _check(
                self.min_tokens <= self.max_tokens,
                "min_tokens",
                "must not exceed max_tokens",
                self.min_tokens,
            )
        for name in ("logprobs", "prompt_logprobs"):
            value = getattr(self, name)
            if value is not None:
                _check(0 <= value <= 20, name, "must be in [0, 20]", value)
        _check(all(s for s in self.stop), "stop", "must not contain empty strings", self.stop)
        _check(
            all(t >= 0 for t in self.stop_token_ids),
            "stop_token_ids",
            "must be non-negative",
            self.stop_token_ids,
        )
        if self.logit_bias is not None:
            for token, bias in self.logit_bias.items():
                _check(-100 <= bias <= 100, "logit_bias", "values must be in [-100, 100]", bias)
                _check(int(token) >= 0, "logit_bias", "keys must be token ids", token)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _check(ok: bool, name: str, rule: str, value: object) -> None:
    if not ok:
        raise ValueError(f"{name} {rule}, got {value!r}")
