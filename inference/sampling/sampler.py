"""The batched sampler: one call per engine step, one row of logits per sequence."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inference.sampling.logprobs import TokenLogprobs, token_logprobs
from inference.sampling.params import SamplingParams
from inference.sampling.penalties import (
    apply_logit_bias,
    apply_min_tokens_block,
    apply_presence_frequency,
    apply_repetition_penalty,
    token_counts,
)

__all__ = [
    "Sampler",
    "SamplerOutput",
    "SamplingRow",
    "TokenLogprobs",
    "has_adjustments",
    "make_generator",
    "token_logprobs",
]


@dataclass
class SamplingRow:
    """One sequence's inputs for this step.

    ``token_ids`` is the sequence's own list (prompt then output), read where a penalty
    needs it and never copied: a row can be made once per sequence and reused every step.
    """

    params: SamplingParams
    token_ids: Sequence[int]
    num_prompt_tokens: int
    generator: torch.Generator | None  # seeded from params.seed; None = unseeded
    min_tokens_blocked_ids: frozenset[int]  # masked while the output is under min_tokens

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    def output_token_ids(self) -> Sequence[int]:
        """The output so far (a copy: only presence/frequency penalties ask for it)."""
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def min_tokens_blocking(self) -> bool:
        return self.num_output_tokens < self.params.min_tokens


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[TokenLogprobs | None]  # None where params.logprobs is None


def make_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator | None:
    """A request's own generator, so its draws do not depend on the rest of the batch."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def _has_adjustments(row: SamplingRow) -> bool:
    p = row.params
    return bool(
        p.repetition_penalty != 1.0
        or p.presence_penalty
        or p.frequency_penalty
        or p.logit_bias
        or (row.min_tokens_blocking and row.min_tokens_blocked_ids)
    )


def has_adjustments(row: SamplingRow) -> bool:
    """Whether the row's logits change before sampling (penalties, bias, min_tokens)."""
    return _has_adjustments(row)


class Sampler:
    """Turns a step's logits into tokens. Every adjustment is a batched tensor op.

    ``adjust`` and ``truncate`` are the two stages before a draw, for the speculative
    verifier (sampling/speculative.py), which draws differently.
    """

    def __init__(self, vocab_size: int) -> None:
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.vocab_size = vocab_size

    def __call__(self, logits: torch.Tensor, rows: list[SamplingRow]) -> SamplerOutput:
        if logits.dim() != 2 or logits.shape[0] != len(rows):
            raise ValueError(
                f"logits must be (len(rows)={len(rows)}, V), got {tuple(logits.shape)}"
            )
        if logits.shape[1] < self.vocab_size:
            raise ValueError(
                f"logits have {logits.shape[1]} columns, fewer than vocab_size {self.vocab_size}"
            )
        if not rows:
            return SamplerOutput(token_ids=[], logprobs=[])
        raw = logits[:, : self.vocab_size].float()  # padded vocab columns are never drawn
        adjusted = any(_has_adjustments(row) for row in rows)
        if all(row.params.greedy for row in rows) and not adjusted:
            token_ids = raw.max(dim=1).indices  # first maximum, as argmax; ~3x faster on CPU
        else:
            processed = self._adjust(raw.clone(), rows) if adjusted else raw
            token_ids = self._choose(processed, rows)
        return SamplerOutput(
            token_ids=token_ids.tolist(), logprobs=self._logprobs(raw, token_ids, rows)
        )

    def _adjust(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        device, vocab = logits.device, self.vocab_size

        def column(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, device=device, dtype=logits.dtype).view(-1, 1)

        params = [row.params for row in rows]
        # Each penalty's counts are built only when some row sets it, and only from the
        # tokens of the rows that set it.
        no_ids: list[int] = []
        if any(p.repetition_penalty != 1.0 for p in params):
            ids = [r.token_ids if r.params.repetition_penalty != 1.0 else no_ids for r in rows]
            seen = token_counts(ids, vocab, device) > 0
            apply_repetition_penalty(logits, seen, column([p.repetition_penalty for p in params]))
        if any(p.presence_penalty or p.frequency_penalty for p in params):
            outputs = [
                r.output_token_ids()
                if r.params.presence_penalty or r.params.frequency_penalty
                else no_ids
                for r in rows
            ]
            counts = token_counts(outputs, vocab, device)
            apply_presence_frequency(
                logits,
                counts,
                column([p.presence_penalty for p in params]),
                column([p.frequency_penalty for p in params]),
            )
        apply_logit_bias(logits, [p.logit_bias for p in params], vocab)
        blocked = [r.min_tokens_blocked_ids if r.min_tokens_blocking else frozenset() for r in rows]
        apply_min_tokens_block(logits, blocked, vocab)
        return logits

    def _choose(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        greedy = torch.tensor([r.params.greedy for r in rows], device=logits.device)
        greedy_ids = logits.max(dim=1).indices
        if bool(greedy.all()):
            return greedy_ids
        masked = self._truncate(logits, rows)
        # Exponential race: argmax(logit - log E), E ~ Exp(1), draws exactly from softmax.
        noise = torch.empty_like(masked)
        unseeded = [i for i, r in enumerate(rows) if r.generator is None]
        if unseeded:
            noise[unseeded] = torch.empty(
                len(unseeded), masked.shape[1], device=masked.device
            ).exponential_()
        for i, row in enumerate(rows):
            if row.generator is not None and not row.params.greedy:
                noise[i].exponential_(generator=row.generator)  # one draw per row per step
            elif row.generator is not None:
                noise[i] = 1.0
        sampled_ids = (masked - noise.log()).max(dim=1).indices
        return torch.where(greedy, greedy_ids, sampled_ids)

    def _truncate(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Temperature, then top-k, top-p and min-p masks, from a single sort."""
        device, vocab = logits.device, logits.shape[1]
        params = [r.params for r in rows]
        temperature = torch.tensor(
            [p.temperature if p.temperature > 0 else 1.0 for p in params], device=device
        ).view(-1, 1)
        scaled = logits / temperature
        top_k = [p.top_k if p.top_k > 0 else vocab for p in params]
        if all(k >= vocab for k in top_k) and all(
            p.top_p >= 1.0 and p.min_p <= 0.0 for p in params
        ):
            return scaled
        # When every row has a top_k, only the largest k matter: topk is far cheaper than
        # sorting the whole vocabulary, and tokens outside it stay masked.
        width = max(top_k)
        if width < vocab:
            sorted_logits, order = scaled.topk(width, dim=1)
        else:
            sorted_logits, order = scaled.sort(dim=1, descending=True, stable=True)
        positions = torch.arange(width, device=device).view(1, -1)
        drop = positions >= torch.tensor(top_k, device=device).view(-1, 1)
        sorted_logits = sorted_logits.masked_fill(drop, -math.inf)
        # top-p over what top-k kept: keep the smallest prefix whose mass reaches top_p;
        # a token goes only if the mass before it already does, so the top token stays.
        probs = sorted_logits.softmax(dim=1)
        mass_before = probs.cumsum(dim=1) - probs
        top_p = torch.tensor([p.top_p for p in params], device=device).view(-1, 1)
        drop = (mass_before >= top_p) & (top_p < 1.0)  # top_p 1: rounding must not drop
        # min-p: drop tokens below min_p times the top token's probability.
        min_p = torch.tensor([p.min_p for p in params], device=device).view(-1, 1)
        drop |= probs < min_p * probs[:, :1]
        drop[:, 0] = False
        sorted_logits = sorted_logits.masked_fill(drop, -math.inf)
        return torch.full_like(scaled, -math.inf).scatter_(1, order, sorted_logits)

    def adjust(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Penalties, logit bias and min_tokens, in place on ``logits`` (len(rows), V)."""
        return self._adjust(logits, rows)

    def truncate(self, logits: torch.Tensor, rows: list[SamplingRow]) -> torch.Tensor:
        """Temperature, top-k, top-p and min-p: the logits a draw is made from."""
        return self._truncate(logits, rows)

    def _logprobs(
        self, raw: torch.Tensor, token_ids: torch.Tensor, rows: list[SamplingRow]
    ) -> list[TokenLogprobs | None]:
        wanted = [i for i, r in enumerate(rows) if r.params.logprobs is not None]
        result: list[TokenLogprobs | None] = [None] * len(rows)
        if not wanted:
            return result
        k = max(rows[i].params.logprobs or 0 for i in wanted)
        index = torch.tensor(wanted, device=raw.device)
        for i, item in zip(wanted, token_logprobs(raw[index], token_ids[index], k), strict=True):
            item.top = item.top[: rows[i].params.logprobs or 0]
            result[i] = item
        return result
