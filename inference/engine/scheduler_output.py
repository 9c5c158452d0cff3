"""The typed message from the scheduler to the model runner. No tensors here."""

from __future__ import annotations

from dataclasses import dataclass, field

from inference.engine.sequence import Sequence


@dataclass(frozen=True, slots=True)
class ScheduledSequence:
    """One sequence's share of a step.

    The model runner feeds ``seq.token_ids[start : start + num_new_tokens]`` at positions
    ``start ...``, writes their KV into ``seq.block_table``, and attends over the first
    ``start + num_new_tokens`` tokens. ``sample`` is True when this chunk ends at the last
    token of the sequence, so the step yields the next token's logits.

    A verify step (speculative decoding) also feeds ``spec_token_ids``, tokens proposed to
    follow the sequence's last one and not yet in ``seq.token_ids``: they take positions
    ``end ...`` and their KV is written, but it holds only once the sampler accepts them
    (the scheduler then advances the sequence past the accepted ones and releases the
    rest). Such a sequence samples at each of its last ``1 + len(spec_token_ids)`` rows.
    """

    seq: Sequence
    start: int  # == seq.num_computed_tokens when scheduled
    num_new_tokens: int  # of the sequence's own tokens
    sample: bool
    spec_token_ids: tuple[int, ...] = ()

    @property
    def end(self) -> int:
        """Past the sequence's own tokens fed this step (proposed ones not counted)."""
        return self.start + self.num_new_tokens

    @property
    def num_query_tokens(self) -> int:
        """Rows this sequence takes in the step: its own new tokens and the proposed ones."""
        return self.num_new_tokens + len(self.spec_token_ids)

    @property
    def num_sample_rows(self) -> int:
        return 1 + len(self.spec_token_ids) if self.sample else 0


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    num_preempted: int = 0  # sequences preempted (by recompute) while building this step

    @property
    def num_tokens(self) -> int:
        return sum(s.num_query_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled
