"""CUDA graphs for decode steps: one launch replays a whole forward pass.

A decode step at a small batch is bound by kernel launches, not by the GPU: some ten
kernels per layer, each a few microseconds of Python and driver work. A graph captured
once per padded batch size replays them all in one call.

- Sizes come from `graph_batch_sizes` (1, 2, 4, 8, ... up to max_num_seqs); a step of n
  decodes runs in the smallest size >= n, the extra rows padded so that they write no KV
  (slot -1) and attend to nothing (length 0).
- Each size is captured lazily, the first time a step needs it, so start-up stays fast.
- A graph reads fixed addresses, so the inputs live in static buffers that each step
  overwrites, and the attention metadata the graph captures is made of those buffers. The decode
  kernel's number of splits is planned for the longest context a sequence may reach; each
  sequence spreads its own context over them, so short ones still fill the GPU.
- Only pure decode steps replay; anything else (prefill chunks, a batch larger than the
  largest size) runs eagerly. A capture that fails turns graphs off with a warning.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from inference.engine.step_inputs import StepInputs
from inference.kernels.attention import AttentionBackend, KVCache
from inference.model.llama import LlamaForCausalLM

if TYPE_CHECKING:  # triton is imported only where graphs are used
    from inference.kernels.triton.backend import TritonAttentionBackend, TritonAttentionMetadata

log = logging.getLogger("inference.engine")

MAX_GRAPH_BATCH = 512


def graph_batch_sizes(max_num_seqs: int, limit: int = MAX_GRAPH_BATCH) -> list[int]:
    """Powers of two from 1 up to the first that holds min(max_num_seqs, limit) decodes."""
    if max_num_seqs < 1:
        raise ValueError(f"max_num_seqs must be at least 1, got {max_num_seqs}")
    largest = min(max_num_seqs, limit)
    sizes = [1]
    while sizes[-1] < largest:
        sizes.append(sizes[-1] * 2)
    return sizes


def padded_batch_size(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest graph size that holds ``num_seqs`` decodes; None when none does."""
    return next((size for size in sizes if size >= num_seqs), None)


NUM_ROW_FIELDS = 4  # input_ids, positions, slots, seq_lens


def pad_decode_inputs(inputs: StepInputs, size: int, max_blocks: int) -> np.ndarray:
    """Pack a step into the static buffers' host layout, padded to ``size`` rows.

    Layout (int64): rows of [input_ids | positions | slots | seq_lens], each ``size`` long,
    then ``size`` block-table rows of ``max_blocks``. Padding rows hold token 0 at position
    0, slot -1 (the KV write skips it) and length 0 (attention reads nothing).
    """
    if not inputs.is_pure_decode:
        raise ValueError("only a pure decode step (one token per sequence) is padded")
    n = inputs.num_seqs
    width = inputs.block_tables.shape[1]
    if n > size:
        raise ValueError(f"{n} decodes do not fit a graph of {size}")
    if width > max_blocks:
        raise ValueError(f"block tables of {width} blocks exceed the graphs' {max_blocks}")
    rows = np.zeros((NUM_ROW_FIELDS, size), dtype=np.int64)
    rows[2, :] = -1
    rows[0, :n] = inputs.input_ids
    rows[1, :n] = inputs.positions
    rows[2, :n] = inputs.slots
    rows[3, :n] = inputs.seq_lens
    tables = np.zeros((size, max_blocks), dtype=np.int64)
    tables[:n, :width] = inputs.block_tables
    return np.concatenate([rows.reshape(-1), tables.reshape(-1)])


def make_decode_graphs(
    model: LlamaForCausalLM,
    kv_caches: list[KVCache],
    backend: AttentionBackend[Any],
    *,
    enforce_eager: bool,
    max_num_seqs: int,
    max_model_len: int | None,
    block_size: int,
    device: torch.device,
) -> DecodeGraphRunner | None:
    """Graphs where they can work: CUDA, the Triton backend, not ``enforce_eager``."""
    if enforce_eager or device.type != "cuda" or max_model_len is None:
        return None
    from inference.kernels.triton.backend import TritonAttentionBackend

    if not isinstance(backend, TritonAttentionBackend):  # the torch path is not capturable
        return None
    return DecodeGraphRunner(
        model,
        kv_caches,
        backend,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=block_size,
        device=device,
    )


class DecodeBuffers:
    """One padded batch size's inputs on the device, and the Triton attention metadata
    over them: what a CUDA graph of that size captures, and so reads at each replay.

    Nothing here needs CUDA: the metadata is the Triton backend's, which a CPU test runs
    under triton's interpreter.
    """

    def __init__(self, size: int, max_blocks: int, block_size: int, device: torch.device):
        from inference.kernels.triton.backend import TritonAttentionMetadata

        self.size = size
        self.max_blocks = max_blocks
        self.packed = torch.zeros(
            NUM_ROW_FIELDS * size + size * max_blocks, dtype=torch.int64, device=device
        )
        rows = self.packed[: NUM_ROW_FIELDS * size].view(NUM_ROW_FIELDS, size)
        self.input_ids, self.positions, slots, seq_lens = rows
        tables = self.packed[NUM_ROW_FIELDS * size :].view(size, max_blocks)
        arange = torch.arange(size + 1, dtype=torch.int32, device=device)
        # The number of decode splits is planned for the longest context there may be.
        self.metadata = TritonAttentionMetadata(
            slot_mapping=slots,
            block_tables=tables,
            seq_lens=seq_lens,
            query_start_loc=arange,
            decode_seq_idx=arange[:size],
            decode_rows=arange[:size],
            max_decode_len=max_blocks * block_size,
            prefill_seq_idx=arange[:0],
            max_query_len=0,
        )

    def stage(self, inputs: StepInputs) -> None:
        """Overwrite the buffers with one step: one host-to-device copy."""
        self.packed.copy_(torch.from_numpy(pad_decode_inputs(inputs, self.size, self.max_blocks)))


class DecodeGraphRunner:
    """Captures and replays decode forwards for a model on CUDA with the Triton backend."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_caches: list[KVCache],
        backend: TritonAttentionBackend,
        *,
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        device: torch.device,
    ) -> None:
        if device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.model = model
        self.kv_caches = kv_caches
        self.backend = backend
        self.block_size = block_size
        self.device = device
        self.sizes = graph_batch_sizes(max_num_seqs)
        self.max_blocks = -(-max_model_len // block_size)
        self.enabled = True
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle()  # one memory pool for every size
        self._buffers: dict[int, DecodeBuffers] = {}  # made outside any capture
        self.recording_steps = 0  # steps that captured (warm-up runs included): slow once

    def can_run(self, num_seqs: int, width: int) -> bool:
        """Whether a pure decode step of ``num_seqs`` with ``width``-block tables replays."""
        return self.enabled and num_seqs <= self.sizes[-1] and width <= self.max_blocks

    @property
    def num_captured(self) -> int:
        return len(self._graphs)

    def run(self, inputs: StepInputs) -> torch.Tensor | None:
        """Final hidden states (n, hidden) of the step, or None to run it eagerly."""
        size = padded_batch_size(inputs.num_seqs, self.sizes)
        if size is None or not self.enabled:
            return None
        buffers = self._buffers.get(size)
        if buffers is None:
            buffers = DecodeBuffers(size, self.max_blocks, self.block_size, self.device)
            self._buffers[size] = buffers
        buffers.stage(inputs)
        entry = self._graphs.get(size)
        if entry is None:
            entry = self._capture(buffers)
            if entry is None:
                return None
        graph, hidden = entry
        graph.replay()
        return hidden[: inputs.num_seqs]

    def _capture(self, buffers: DecodeBuffers) -> tuple[torch.cuda.CUDAGraph, torch.Tensor] | None:
        meta: TritonAttentionMetadata = buffers.metadata
        args = (buffers.input_ids, buffers.positions, self.kv_caches, meta)
        self.recording_steps += 1
        try:
            # Warm up on a side stream first: Triton compiles and cuBLAS picks its kernels
            # outside the capture. These runs compute this very step (same buffers), so the
            # KV they write is what the replay writes again.
            stream = torch.cuda.Stream(self.device)
            stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.model(*args)
            torch.cuda.current_stream(self.device).wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=self._pool):
                hidden = self.model(*args)
        except Exception:  # a model that cannot be captured still runs, eagerly
            log.warning(
                "CUDA graph capture failed at batch %d; decoding eagerly",
                buffers.size,
                exc_info=True,
            )
            self.enabled = False
            return None
        self._graphs[buffers.size] = (graph, hidden)
        log.info("captured a CUDA graph for decode batch %d", buffers.size)
        return graph, hidden
