"""One sequence (one sample of one request) as the engine tracks it."""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field

from inference.sampling.params import SamplingParams

_seq_ids = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    """The token ids of one sample (prompt then generated) and where its KV lives.

    One writer per field: the scheduler writes progress (``num_computed_tokens``,
    ``num_cached_tokens``), ``status`` and ``finish_reason``; the block manager writes
    ``block_table`` and ``block_hashes``; the engine appends sampled tokens.

    Invariants (kept by the scheduler and block manager, checked by their tests):
    - ``num_computed_tokens <= len(token_ids)``: KV is in the cache for exactly the first
      ``num_computed_tokens`` tokens; the rest still have to go through the model.
    - ``block_table`` holds ``ceil(num_computed_tokens / block_size)`` blocks or more.
    - ``num_cached_tokens`` is how many prompt tokens the prefix cache supplied the first
      time this sequence was allocated (what ``RequestOutput.num_cached_tokens`` reports).
    """

    request_id: str
    token_ids: list[int]
    params: SamplingParams
    sample_index: int = 0  # which of the request's n samples this is
    tenant: str = "default"
    weight: float = 1.0  # the tenant's scheduling weight
    arrival_time: float = 0.0
    seq_id: int = field(default_factory=lambda: next(_seq_ids))
    num_prompt_tokens: int = -1
    status: SequenceStatus = SequenceStatus.WAITING
    block_table: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    # Chained hashes of this sequence's full blocks, memoised by the block manager.
    block_hashes: list[int] = field(default_factory=list)
    finish_reason: str | None = None  # "stop" | "length" | "abort"

    def __post_init__(self) -> None:
        if self.num_prompt_tokens < 0:
            self.num_prompt_tokens = len(self.token_ids)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def reads_prefix_cache(self) -> bool:
        """False when every prompt position must go through the model (prompt logprobs)."""
        return self.params.prompt_logprobs is None

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
