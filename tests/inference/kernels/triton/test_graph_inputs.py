"""What a CUDA graph of decode steps runs, on the CPU under triton's interpreter.

A graph replays one layer's KV write and attention on `DecodeBuffers`: static tensors that
each step overwrites, padded to the graph's batch size with rows that must write no KV
(slot -1) and attend to nothing (length 0), and a plan whose decode splits are sized for
the longest context there may be. The graph itself needs CUDA; the buffers, the plan and
the kernels reading them do not, so here they are run as the graph would run them and
compared with the torch path on the unpadded step.
"""

from __future__ import annotations

import numpy as np
import torch

from inference.engine.cuda_graphs import DecodeBuffers
from inference.engine.scheduler_output import ScheduledSequence, SchedulerOutput
from inference.engine.sequence import Sequence
from inference.engine.step_inputs import StepInputs, prepare_step
from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.kv_cache import KVCache
from inference.kernels.triton.backend import TritonAttentionBackend
from inference.kernels.triton.decode_attention import plan_splits
from inference.sampling.params import SamplingParams

BLOCK_SIZE = 16
NUM_KV_HEADS, GROUP, HEAD_DIM = 2, 3, 16
MAX_BLOCKS = 4  # max_model_len 64
NUM_BLOCKS = 16


def decode_step(lengths: list[int], tables: list[list[int]], seed: int) -> StepInputs:
    """One token per sequence, at the end of contexts of ``lengths`` (after the step)."""
    rng = np.random.default_rng(seed)
    batch = SchedulerOutput()
    for length, table in zip(lengths, tables, strict=True):
        tokens = rng.integers(1, 100, length).tolist()
        seq = Sequence("r", tokens, SamplingParams(), block_table=list(table))
        batch.scheduled.append(ScheduledSequence(seq, length - 1, 1, sample=True))
    return prepare_step(batch, BLOCK_SIZE)


def run_both(
    step: StepInputs, buffers: DecodeBuffers, caches: tuple[KVCache, KVCache], seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(the padded graph step's output, the torch path's on the real rows)."""
    graph_cache, torch_cache = caches
    gen = torch.Generator().manual_seed(seed)
    size, n = buffers.size, step.num_seqs
    key, value = (torch.randn(size, NUM_KV_HEADS, HEAD_DIM, generator=gen) for _ in range(2))
    query = torch.randn(size, NUM_KV_HEADS * GROUP, HEAD_DIM, generator=gen)
    scale = HEAD_DIM**-0.5

    buffers.stage(step)
    backend = TritonAttentionBackend(target_programs=64, decode_block_n=16)
    meta = buffers.metadata  # what the graph captured: no metadata made from the step
    backend.write_kv(key, value, graph_cache, meta.slot_mapping)
    out = backend.forward(query, graph_cache, meta, scale)

    reference = TorchAttentionBackend()
    ref_meta = reference.build_metadata(step, query.device)
    reference.write_kv(key[:n], value[:n], torch_cache, ref_meta.slot_mapping)
    return out, reference.forward(query[:n], torch_cache, ref_meta, scale)


def test_a_padded_step_writes_and_attends_as_the_unpadded_one() -> None:
    torch.manual_seed(0)
    shape = (NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM)
    pools = [torch.randn(shape) for _ in range(2)]
    caches = (KVCache(*(p.clone() for p in pools)), KVCache(*(p.clone() for p in pools)))
    # The decode kernel really splits: 4 splits for the 64-token bound, and each context
    # of the step below (17, 4, 40 tokens) spread over 2, 1 and 3 of them.
    assert plan_splits(4, NUM_KV_HEADS, MAX_BLOCKS * BLOCK_SIZE, 16, 64) == 4
    buffers = DecodeBuffers(4, MAX_BLOCKS, BLOCK_SIZE, torch.device("cpu"))
    tables = [[5, 2], [7], [9, 1, 12]]
    step = decode_step([17, 4, 40], tables, seed=1)
    out, expected = run_both(step, buffers, caches, seed=2)

    assert buffers.input_ids.tolist() == [*step.input_ids.tolist(), 0]
    assert buffers.positions.tolist() == [16, 3, 39, 0]
    torch.testing.assert_close(out[:3], expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[3], torch.zeros_like(out[3]))  # the padding row attends to nothing
    for graph_pool, torch_pool in zip(*caches, strict=True):
        assert torch.equal(graph_pool, torch_pool)  # and writes nothing (slot -1)

    # The next step overwrites the same tensors, which is all a replay reads: two longer
    # contexts, one new table, and two padding rows now.
    meta = buffers.metadata
    before = meta.seq_lens.data_ptr(), meta.block_tables.data_ptr()
    tables = [[5, 2, 3], [11, 6, 0, 4]]
    step = decode_step([33, 64], tables, seed=3)
    out, expected = run_both(step, buffers, caches, seed=4)
    assert (meta.seq_lens.data_ptr(), meta.block_tables.data_ptr()) == before
    assert meta.seq_lens.tolist() == [33, 64, 0, 0]
    torch.testing.assert_close(out[:2], expected, rtol=1e-5, atol=1e-5)
    assert torch.equal(out[2:], torch.zeros_like(out[2:]))
    for graph_pool, torch_pool in zip(*caches, strict=True):
        assert torch.equal(graph_pool, torch_pool)
