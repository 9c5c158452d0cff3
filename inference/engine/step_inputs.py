"""The host-side inputs of one step, made from the scheduler's output by a pure function.

`prepare_step` reads the scheduled sequences (their tokens and block tables) and returns
new arrays; it changes no sequence, scheduler or runner state, so a test can call it on a
hand-made `SchedulerOutput` and check every field. The result is what every consumer of a
step reads: the model runner (token ids, positions), each attention backend
(`backend.build_metadata(step, device)`: a `StepInputs` is a `PagedLayout`), a CUDA graph's
static buffers, and the other tensor-parallel ranks, to which rank 0 broadcasts it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from inference.engine.scheduler_output import SchedulerOutput
from inference.kernels.attention import PagedLayout


@dataclass(frozen=True, slots=True)
class StepInputs(PagedLayout):
    """One forward pass: the flat batch of new tokens and its attention layout.

    Every tensor-parallel rank builds the same tensors from it; block ids index every
    rank's KV pool, since all pools have the same number of blocks.
    """

    input_ids: np.ndarray  # (T,) int64
    positions: np.ndarray  # (T,) int64
    # Rows of the flat batch whose logits are sampled, in scheduling order: each sampling
    # sequence's last row, or, for a verify step, its last 1 + k rows (its own last token's
    # and each proposed token's).
    sample_rows: list[int]

    def __post_init__(self) -> None:
        PagedLayout.__post_init__(self)
        if self.input_ids.shape != self.slots.shape or self.positions.shape != self.slots.shape:
            raise ValueError("input_ids, positions and slots must have one entry per new token")


def prepare_step(output: SchedulerOutput, block_size: int) -> StepInputs:
    """The inputs of the step ``output`` schedules (pure: it changes no sequence).

    Each scheduled sequence feeds ``token_ids[start:end]`` then its ``spec_token_ids`` at
    positions ``start ...``, whose KV goes to their slots in its block table, and attends
    over everything up to its last fed token. Block tables are padded with 0 to the longest.
    """
    if output.is_empty:
        raise ValueError("an empty step has no inputs")
    scheduled = output.scheduled
    num_tokens = output.num_tokens
    input_ids = np.empty(num_tokens, dtype=np.int64)
    positions = np.empty(num_tokens, dtype=np.int64)
    slots = np.empty(num_tokens, dtype=np.int64)
    width = max(len(item.seq.block_table) for item in scheduled)
    tables = np.zeros((len(scheduled), width), dtype=np.int64)
    query_start_loc = [0]
    seq_lens: list[int] = []
    sample_rows: list[int] = []
    for row, item in enumerate(scheduled):
        seq = item.seq
        end = item.start + item.num_query_tokens
        if len(seq.block_table) * block_size < end:
            raise ValueError(
                f"sequence {seq.seq_id}: {end} tokens do not fit its "
                f"{len(seq.block_table)} blocks of {block_size}"
            )
        lo = query_start_loc[-1]
        mid, hi = lo + item.num_new_tokens, lo + item.num_query_tokens
        table = np.asarray(seq.block_table, dtype=np.int64)
        pos = np.arange(item.start, end, dtype=np.int64)
        input_ids[lo:mid] = seq.token_ids[item.start : item.end]
        input_ids[mid:hi] = item.spec_token_ids
        positions[lo:hi] = pos
        slots[lo:hi] = table[pos // block_size] * block_size + pos % block_size
        tables[row, : len(table)] = table
        query_start_loc.append(hi)
        seq_lens.append(end)
        sample_rows.extend(range(hi - item.num_sample_rows, hi))
    return StepInputs(
        slots=slots,
        query_start_loc=query_start_loc,
        seq_lens=seq_lens,
        block_tables=tables,
        block_size=block_size,
        input_ids=input_ids,
        positions=positions,
        sample_rows=sample_rows,
    )
