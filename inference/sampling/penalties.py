"""Batched logit adjustments: repetition/presence/frequency penalties, bias, min_tokens."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _padded_ids(
    id_lists: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> torch.Tensor:
    """(B, L) long tensor of each row's ids, padded with ``pad_id`` (an extra column)."""
    width = max((len(ids) for ids in id_lists), default=0)
    out = torch.full((len(id_lists), max(width, 1)), pad_id, dtype=torch.long)
    for row, ids in enumerate(id_lists):
        if ids:
            out[row, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return out.to(device)


def token_counts(
    id_lists: Sequence[Sequence[int]], vocab_size: int, device: torch.device
) -> torch.Tensor:
    """(B, V) float counts of each row's ids, by one scatter into a spare pad column."""
    ids = _padded_ids(id_lists, vocab_size, device)
    counts = torch.zeros(len(id_lists), vocab_size + 1, device=device)
    counts.scatter_add_(1, ids, torch.ones_like(ids, dtype=counts.dtype))
    return counts[:, :vocab_size]


def apply_repetition_penalty(
    logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor
) -> None:
    """In place: tokens seen in prompt or output are made less likely (HF / vLLM rule).

    A positive logit is divided by the penalty and a negative one multiplied, so a
    penalty above 1 always pushes the token down. ``penalty``: (B, 1).
    """
    scaled = torch.where(logits > 0, logits / penalty, logits * penalty)
    logits.copy_(torch.where(seen, scaled, logits))


def apply_presence_frequency(
    logits: torch.Tensor,
    output_counts: torch.Tensor,
    presence: torch.Tensor,
    frequency: torch.Tensor,
) -> None:
    """In place, OpenAI's rule: logit -= frequency * count + presence * (count > 0)."""
    logits -= frequency * output_counts + presence * (output_counts > 0).to(logits.dtype)


def apply_logit_bias(
    logits: torch.Tensor, biases: Sequence[dict[int, float] | None], vocab_size: int
) -> None:
    """In place: add each row's token -> bias map. An id outside the vocabulary is an error."""
    rows: list[int] = []
    cols: list[int] = []
    values: list[float] = []
    for row, bias in enumerate(biases):
        for token, value in (bias or {}).items():
            token = int(token)
            if not 0 <= token < vocab_size:
                raise ValueError(
                    f"logit_bias token id {token} is outside the vocabulary (size {vocab_size})"
                )
            rows.append(row)
            cols.append(token)
            values.append(float(value))
    if rows:
        device = logits.device
        logits.index_put_(
            (torch.tensor(rows, device=device), torch.tensor(cols, device=device)),
            torch.tensor(values, device=device, dtype=logits.dtype),
            accumulate=True,
        )


def apply_min_tokens_block(
    logits: torch.Tensor, blocked: Sequence[frozenset[int]], vocab_size: int
) -> None:
    """In place: forbid each row's blocked ids (eos, stop ids) while below min_tokens."""
    pairs = [(row, t) for row, ids in enumerate(blocked) for t in ids if 0 <= t < vocab_size]
    rows = [row for row, _ in pairs]
    cols = [token for _, token in pairs]
    if rows:
        device = logits.device
        logits[torch.tensor(rows, device=device), torch.tensor(cols, device=device)] = -float("inf")
