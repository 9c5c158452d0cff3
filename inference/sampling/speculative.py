"""Acceptance of proposed tokens (speculative decoding), kept apart from the plain sampler.

A verify step gives a sequence ``1 + k`` rows of target logits: row ``j`` predicts the
token after the sequence's last token and the first ``j`` proposed ones. The rows are
adjusted and truncated exactly as the sampler does for a plain step (penalties see the
proposed tokens before each row as output), then:

- greedy: proposed tokens are accepted while each equals the target's argmax; at the first
  mismatch the target's token is taken instead; if all match, row ``k`` gives one more. The
  tokens are those plain greedy decoding yields.
- sampling (rejection sampling with a point-mass proposal, as the n-gram proposer makes):
  proposed token ``d`` at row ``j`` is accepted with probability ``p_j(d)``; on rejection
  the token is drawn from ``p_j`` with ``d`` removed and renormalised, and the run ends;
  if all are accepted, one more is drawn from ``p_k``. Each emitted token is then
  distributed exactly as the target's: P(d) = p(d), P(t != d) = (1 - p(d)) p(t)/(1 - p(d)).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from inference.sampling.logprobs import TokenLogprobs, token_logprobs
from inference.sampling.sampler import Sampler, SamplingRow, has_adjustments


@dataclass
class Verified:
    """What one verify step yields for one sequence: the tokens to append, in order."""

    token_ids: list[int]
    logprobs: list[TokenLogprobs | None]
    num_accepted: int  # of the proposed tokens (token_ids has num_accepted + 1)


def position_rows(row: SamplingRow, proposed: Sequence[int]) -> list[SamplingRow]:
    """One row per verified position; each sees the proposed tokens before it as output
    (only penalties and min_tokens read them, so otherwise the row is shared)."""
    if not has_adjustments(row) and not row.params.min_tokens:
        return [row] * (len(proposed) + 1)
    base = list(row.token_ids)
    return [replace(row, token_ids=base + list(proposed[:j])) for j in range(len(proposed) + 1)]


def verify(
    sampler: Sampler, logits: torch.Tensor, row: SamplingRow, proposed: Sequence[int]
) -> Verified:
    """Accept a prefix of ``proposed`` against ``logits`` (1 + k, V) and add one token."""
    k = len(proposed)
    if logits.dim() != 2 or logits.shape[0] != k + 1:
        raise ValueError(f"need {k + 1} rows of logits for {k} proposed tokens")
    raw = logits[:, : sampler.vocab_size].float()
    rows = position_rows(row, proposed)
    adjusted = sampler.adjust(raw.clone(), rows) if has_adjustments(row) else raw
    if row.params.greedy:
        targets = adjusted.max(dim=1).indices.tolist()
        accepted = 0
        while accepted < k and targets[accepted] == proposed[accepted]:
            accepted += 1
        token_ids = [*proposed[:accepted], int(targets[accepted])]
    else:
        probs = sampler.truncate(adjusted, rows).softmax(dim=1)
        token_ids, accepted = _rejection_sample(probs, proposed, row.generator)
    return Verified(token_ids, _logprobs(raw, token_ids, row), accepted)


def _rejection_sample(
    probs: torch.Tensor, proposed: Sequence[int], generator: torch.Generator | None
) -> tuple[list[int], int]:
    k = len(proposed)
    draws = torch.rand(k, generator=generator, device=probs.device).tolist() if k else []
    for j, token in enumerate(proposed):
        p = probs[j]
        if draws[j] < float(p[token]):
            continue
        residual = p.clone()
        residual[token] = 0.0
        chosen = int(torch.multinomial(residual, 1, generator=generator))
        return [*proposed[:j], chosen], j
    bonus = int(torch.multinomial(probs[k], 1, generator=generator))
    return [*proposed, bonus], k


def _logprobs(
    raw: torch.Tensor, token_ids: list[int], row: SamplingRow
) -> list[TokenLogprobs | None]:
    want = row.params.logprobs
    if want is None:
        return [None] * len(token_ids)
    items = token_logprobs(raw[: len(token_ids)], torch.tensor(token_ids), want)
    return list(items)
