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
    """

    seq: Sequence
    start: int  # == seq.num_computed_tokens when scheduled
    num_new_tokens: int
    sample: bool

    @property
    def end(self) -> int:
        return self.start + self.num_new_tokens


@dataclass(slots=True)
class SchedulerOutput:
    scheduled: list[ScheduledSequence] = field(default_factory=list)
    num_preempted: int = 0  # sequences preempted (by recompute) while building this step

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new_tokens for s in self.scheduled)

    @property
    def is_empty(self) -> bool:
        return not self.scheduled
