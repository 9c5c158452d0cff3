"""Speculative decoding in the engine's step: who gets proposals, and the counters.

Before a step, each running sequence that is about to decode (all its tokens but the last
computed) and whose request allows it (``SamplingParams.speculative``) gets up to ``k``
proposed tokens; the scheduler turns its decode into a verify step when blocks and budget
allow. After the step the sampler's verifier (sampling/speculative.py) accepts a prefix,
the engine appends it and one more token, and the scheduler releases the rest.

A proposal never runs past what the sequence may still emit: ``max_tokens`` and the
context limit cap it, so a verify step never writes KV beyond ``max_model_len``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

import torch

from inference.engine.draft_model import DraftModel
from inference.engine.draft_proposer import DraftProposer
from inference.engine.engine_config import EngineConfig
from inference.engine.ngram_proposer import NgramProposer
from inference.engine.sequence import Sequence


class Proposer(Protocol):
    """What proposes tokens: the n-gram lookup (ngram_proposer.py) or a draft model
    (draft_proposer.py)."""

    def propose_batch(self, rows: list[tuple[Sequence, int]]) -> dict[int, list[int]]:
        """For each (sequence, limit): up to ``min(k, limit)`` tokens to follow its tokens,
        as seq_id -> tokens (a sequence with nothing to propose is left out)."""
        ...

    def retain(self, running: Iterable[Sequence]) -> None:
        """Drop whatever is held for sequences not in ``running`` (finished, preempted)."""
        ...


@dataclass
class SpecDecodeStats:
    """Counters since start (what `/metrics` and the benchmark report)."""

    num_verify_steps: int = 0  # sequence-steps that verified at least one proposed token
    num_proposed_tokens: int = 0
    num_accepted_tokens: int = 0
    num_emitted_tokens: int = 0  # by verify steps: accepted ones plus one each

    @property
    def acceptance_rate(self) -> float:
        """Accepted proposed tokens over proposed ones (0 before any)."""
        proposed = self.num_proposed_tokens
        return self.num_accepted_tokens / proposed if proposed else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens a verify step emits on average: accepted proposals plus the target's one."""
        return self.num_emitted_tokens / self.num_verify_steps if self.num_verify_steps else 0.0

    def record(self, num_proposed: int, num_accepted: int) -> None:
        self.num_verify_steps += 1
        self.num_proposed_tokens += num_proposed
        self.num_accepted_tokens += num_accepted
        self.num_emitted_tokens += num_accepted + 1

    def as_dict(self) -> dict[str, float]:
        return {
            "verify_steps": self.num_verify_steps,
            "proposed_tokens": self.num_proposed_tokens,
            "accepted_tokens": self.num_accepted_tokens,
            "acceptance_rate": round(self.acceptance_rate, 4),
            "mean_accepted_length": round(self.mean_accepted_length, 4),
        }


class SpecDecoder:
    def __init__(
        self, proposer: Proposer, max_model_len: int, *, max_batch: int | None = None
    ) -> None:
        self.proposer = proposer
        self.max_model_len = max_model_len
        self.max_batch = max_batch  # no proposals while more sequences than this run
        self.stats = SpecDecodeStats()

    def propose(self, running: Iterable[Sequence]) -> dict[int, list[int]]:
        """seq_id -> proposed tokens, for the sequences about to decode."""
        running = list(running)
        self.proposer.retain(running)
        if self.max_batch is not None and len(running) > self.max_batch:
            return {}
        rows: list[tuple[Sequence, int]] = []
        for seq in running:
            params = seq.params
            if (
                not params.speculative
                or params.constraint is not None  # its mask covers one row per step
                or seq.num_computed_tokens != len(seq) - 1
            ):
                continue
            # The step emits up to len(proposal) + 1 tokens: never more than may come.
            limit = self.max_model_len - len(seq) - 1
            if params.max_tokens is not None:
                limit = min(limit, params.max_tokens - seq.num_output_tokens - 1)
            if limit >= 1:
                rows.append((seq, limit))
        return self.proposer.propose_batch(rows) if rows else {}


def make_spec_decoder(
    config: EngineConfig,
    max_model_len: int,
    draft: DraftModel | None,
    num_blocks: int,
    device: torch.device,
) -> SpecDecoder | None:
    """The engine's decoder for ``config.speculative`` (None: no speculation); a draft
    model's pool gets ``draft_kv_cache_fraction`` of the target pool's ``num_blocks``."""
    proposer: Proposer
    if config.speculative == "ngram":
        k = config.num_speculative_tokens
        proposer = NgramProposer(k, max_n=config.ngram_max, min_n=config.ngram_min)
    elif config.speculative == "draft" and draft is not None:
        if draft.arch.max_position_embeddings < max_model_len:
            raise ValueError(
                f"draft model {draft.path} reads {draft.arch.max_position_embeddings} "
                f"positions at most, fewer than max_model_len {max_model_len}: give "
                "max_model_len no larger than that"
            )
        proposer = DraftProposer(
            draft,
            config.num_speculative_tokens,
            num_blocks=max(1, int(num_blocks * config.draft_kv_cache_fraction)),
            block_size=config.block_size,
            device=device,
            enable_prefix_caching=config.enable_prefix_caching,
            max_num_batched_tokens=config.max_num_batched_tokens or 2048,
            max_num_seqs=config.max_num_seqs,
            max_model_len=max_model_len,
            attention_backend=config.attention_backend,
            enforce_eager=config.enforce_eager,
        )
    else:
        return None
    return SpecDecoder(proposer, max_model_len, max_batch=config.speculative_max_batch)
