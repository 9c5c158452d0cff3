"""prepare_step: a scheduled batch's host-side inputs, checked field by field.

Then each attention backend's metadata from those inputs: what the torch and CPU paths
read is all there, and only the CPU backend looks for shared blocks.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.scheduler import Scheduler
from inference.engine.scheduler_output import ScheduledSequence, SchedulerOutput
from inference.engine.sequence import Sequence
from inference.engine.step_inputs import StepInputs, prepare_step
from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.cpu.backend import build_cpu_metadata
from inference.sampling.params import SamplingParams

CPU = torch.device("cpu")


def sequence(tokens: list[int], table: list[int], computed: int = 0) -> Sequence:
    seq = Sequence("r", tokens, SamplingParams(), block_table=table)
    seq.num_computed_tokens = computed
    return seq


def mixed_batch() -> SchedulerOutput:
    """A decode, a chunk continuing a cached context, and a first chunk (no sample)."""
    decode = sequence(list(range(100, 106)), [7, 3], computed=5)  # 6 tokens, block 4
    chunk = sequence(list(range(200, 210)), [9, 2, 5], computed=4)
    first = sequence(list(range(300, 309)), [1, 8, 6])
    return SchedulerOutput(
        scheduled=[
            ScheduledSequence(decode, start=5, num_new_tokens=1, sample=True),
            ScheduledSequence(chunk, start=4, num_new_tokens=6, sample=True),
            ScheduledSequence(first, start=0, num_new_tokens=5, sample=False),
        ]
    )


def test_every_field_of_a_mixed_step() -> None:
    step = prepare_step(mixed_batch(), block_size=4)
    assert step.input_ids.tolist() == [105, *range(204, 210), *range(300, 305)]
    assert step.positions.tolist() == [5, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4]
    # position p of a sequence lives at block_table[p // 4] * 4 + p % 4
    assert step.slots.tolist() == [
        3 * 4 + 1,
        *(2 * 4 + o for o in range(4)),
        5 * 4 + 0,
        5 * 4 + 1,
        *(1 * 4 + o for o in range(4)),
        8 * 4 + 0,
    ]
    assert step.query_start_loc == [0, 1, 7, 12]
    assert step.seq_lens == [6, 10, 5]
    assert step.block_tables.tolist() == [[7, 3, 0], [9, 2, 5], [1, 8, 6]]  # padded with 0
    assert step.sample_rows == [0, 6]  # the last row of each sampling sequence
    assert step.decode_seqs == [0] and step.prefill_seqs == [1, 2]
    assert not step.is_pure_decode
    assert step.input_ids.dtype == step.slots.dtype == step.block_tables.dtype == np.int64


def test_it_changes_nothing_it_reads() -> None:
    batch = mixed_batch()
    before = [copy.deepcopy(vars(item.seq)) for item in batch.scheduled]
    first, second = prepare_step(batch, 4), prepare_step(batch, 4)
    assert [vars(item.seq) for item in batch.scheduled] == before
    for name in ("input_ids", "positions", "slots", "block_tables"):
        assert np.array_equal(getattr(first, name), getattr(second, name))
    assert first.input_ids is not second.input_ids  # new arrays every time


def test_a_step_the_scheduler_builds() -> None:
    """The scheduler's own output: prefix-free prompts, then their decodes."""
    scheduler = Scheduler(
        SchedulerConfig(max_model_len=64, max_num_batched_tokens=32),
        CacheConfig(num_blocks=16, block_size=4),
    )
    seqs = [sequence(list(range(10 * i, 10 * i + 5 + i)), []) for i in range(3)]
    for seq in seqs:
        scheduler.add(seq)
    prefill = scheduler.schedule()
    step = prepare_step(prefill, 4)
    assert step.seq_lens == [5, 6, 7] and step.sample_rows == [4, 10, 17]
    for row, seq in enumerate(seqs):
        lo, hi = step.query_start_loc[row], step.query_start_loc[row + 1]
        assert step.input_ids[lo:hi].tolist() == seq.token_ids
        table = seq.block_table
        assert step.slots[lo:hi].tolist() == [table[p // 4] * 4 + p % 4 for p in range(hi - lo)]
    scheduler.update_after_step(prefill)
    for seq in seqs:
        seq.append_token(1)
    step = prepare_step(scheduler.schedule(), 4)
    assert step.is_pure_decode and step.positions.tolist() == [5, 6, 7]
    assert step.sample_rows == [0, 1, 2]


def test_it_travels_to_other_ranks_as_it_is() -> None:
    step = prepare_step(mixed_batch(), 4)
    copy_ = pickle.loads(pickle.dumps(step))
    assert isinstance(copy_, StepInputs)
    assert copy_.query_start_loc == step.query_start_loc
    assert np.array_equal(copy_.slots, step.slots)


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="empty step"):
        prepare_step(SchedulerOutput(), 4)
    seq = sequence(list(range(9)), [1, 2])  # 9 tokens need 3 blocks of 4
    batch = SchedulerOutput(scheduled=[ScheduledSequence(seq, 0, 9, sample=True)])
    with pytest.raises(ValueError, match=r"9 tokens.*2 blocks of 4"):
        prepare_step(batch, 4)


def test_each_backend_builds_what_it_reads() -> None:
    step = prepare_step(mixed_batch(), 4)
    meta = TorchAttentionBackend().build_metadata(step, CPU)
    assert meta.slot_mapping.tolist() == step.slots.tolist()
    assert meta.decode_seqs == [0] and meta.prefill_seqs == [1, 2]
    assert meta.decode_rows is not None and meta.decode_rows.tolist() == [0]
    assert meta.decode_blocks is not None and meta.decode_blocks.tolist() == [[7, 3]]
    mask = meta.decode_mask()  # made on first use, then kept
    assert mask is not None and mask[0, 0, 0].tolist() == [True] * 6 + [False] * 2
    assert meta.decode_mask() is mask
    assert not hasattr(meta, "decode_shared_blocks")  # the cascade's, not the torch path's


def test_the_cpu_backend_finds_the_blocks_every_sequence_shares() -> None:
    # Three decodes whose tables start with the same two blocks (a cached system prompt).
    seqs = [sequence(list(range(n)), [4, 9, *own], computed=n - 1) for n, own in
            ((12, [1]), (14, [2, 3]), (10, [5]))]  # fmt: skip
    batch = SchedulerOutput(
        scheduled=[ScheduledSequence(s, len(s) - 1, 1, sample=True) for s in seqs]
    )
    meta = build_cpu_metadata(prepare_step(batch, 4), CPU)
    assert meta.decode_shared_blocks == 2
    assert meta.prefill_shared_blocks == 0
    assert meta.base.decode_lens is not None and meta.base.decode_lens.tolist() == [12, 14, 10]
