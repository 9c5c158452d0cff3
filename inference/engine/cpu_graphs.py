"""CPU decode graphs: a decode step replayed from a recording of its kernel calls.

A batch-1 decode step on the CPU spends more time in the Python around its kernels
(module calls, checks, an allocation per output) than in the kernels: some 300 calls of a
few microseconds each. The CPU's counterpart of a CUDA graph (cuda_graphs.py) is to record
those calls once (inference/kernels/cpu/recording.py: the C kernels' calls, and the torch
ops that compute, such as a float model's oneDNN matmuls) and then make the same calls on
the same addresses each step, with nothing in between.

- One recording per graph size (`cpu_graph_sizes`: every size up to 8, then every eighth
  up to `CPU_GRAPH_MAX_BATCH`); a step of n decodes replays the smallest size that holds
  it, the extra rows padded so that they write no KV (slot -1) and attend to one token of
  block 0 (the kernel asks every sequence for a token). A kept-quantized model's sizes
  stop where its layers stop multiplying in place (`LlamaForCausalLM.rows_in_place`).
- A size records at its second step (the first runs eagerly, so any lazy set-up is done
  first); the recording step is itself a real step: nothing is computed twice. Its
  activations then move into one buffer whose bytes each tensor shares with others not
  live at the same time (inference/kernels/cpu/arena.py: about 9 KB a row for SmolLM2 in
  bfloat16, against 0.53 MiB as allocated); all sizes together keep at most
  `CPU_GRAPH_MEMORY_BYTES`, past which a size runs eagerly.
- The graph reads fixed addresses: the step's inputs (the embedded tokens, the rotary
  angles, slots, lengths and block tables, the tables as wide as the longest context a
  sequence may reach) live in buffers that each step overwrites; the embedding and the
  angles are computed eagerly into them.
- It replays only what a recording can repeat: a pass that reads a value back into Python
  or makes a tensor from Python values is not recorded (recording.py), and then that size
  and every larger one run eagerly. Steps whose decodes share enough leading blocks for the
  cascade (a shared system prompt: the eager path attends it once for the batch) run
  eagerly too, as does anything but a pure decode.
- A change of the model's paths (`set_layer_kernels`, `set_attention_backend`: its
  ``revision``) drops every recording; the weights and KV pools must stay where they are.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from inference.engine.step_inputs import StepInputs
from inference.kernels.attention import AttentionBackend, KVCache, TorchAttentionMetadata
from inference.kernels.cpu.arena import compact
from inference.kernels.cpu.backend import (
    CpuAttentionBackend,
    CpuAttentionMetadata,
    cascade_blocks,
    decode_shared_blocks,
)
from inference.kernels.cpu.recording import Recording, record
from inference.model.llama import LlamaForCausalLM

log = logging.getLogger("inference.engine")

CPU_GRAPH_MAX_BATCH = 64
# What all sizes' recordings may keep alive together; a size that would pass it runs eagerly.
CPU_GRAPH_MEMORY_BYTES = 256 << 20
# The scratch a recording may keep a row: a few MiB for a 70B model's activations, far less
# than a pass that dequantizes whole weights (an FP8 layer's fallback) would keep.
SCRATCH_BYTES_PER_ROW = 32 << 20


def cpu_graph_sizes(max_num_seqs: int, limit: int = CPU_GRAPH_MAX_BATCH) -> list[int]:
    """Every size up to 8 (small batches, the common case when serving, replay with no
    padding row), then every eighth (at most 7 padding rows), ending at
    min(max_num_seqs, limit)."""
    largest = min(max_num_seqs, limit)
    sizes = [*range(1, 9), *range(16, largest, 8)]
    return [size for size in sizes if size < largest] + [largest] if largest > 0 else []


def padded_size(num_seqs: int, sizes: list[int]) -> int | None:
    """The smallest graph size that holds ``num_seqs`` decodes; None when none does."""
    return next((size for size in sizes if size >= num_seqs), None)


class CpuDecodeGraph:
    """One batch size's input buffers, the attention metadata over them, and (once
    recorded) the kernel calls of a pass over them and its output."""

    def __init__(self, size: int, max_blocks: int, block_size: int) -> None:
        self.size = size
        self.slots = torch.zeros(size, dtype=torch.int64)
        self.lens = torch.zeros(size, dtype=torch.int64)
        self.tables = torch.zeros((size, max_blocks), dtype=torch.int64)
        self.meta = CpuAttentionMetadata(
            TorchAttentionMetadata(
                slot_mapping=self.slots,
                query_start_loc=list(range(size + 1)),
                seq_lens=[1] * size,  # the torch path's; a recorded pass never reads them
                block_tables=self.tables,
                block_size=block_size,
                decode_seqs=list(range(size)),
                decode_rows=torch.arange(size, dtype=torch.int64),
                decode_lens=self.lens,
                decode_blocks=self.tables,
            )
        )
        self.hidden: torch.Tensor | None = None  # (size, hidden): the embedded tokens
        self.cos: torch.Tensor | None = None
        self.sin: torch.Tensor | None = None
        self.recording: Recording | None = None
        self.out: torch.Tensor | None = None

    def stage(self, step: StepInputs, model: LlamaForCausalLM) -> None:
        """Overwrite the buffers with ``step`` (its block tables fit: `can_run` checked),
        padded to the graph's size: padding rows feed token 0 at position 0, write no KV
        (slot -1) and attend to the first token of block 0 (length 1)."""
        n = step.num_seqs
        slots, lens, tables = self.slots.numpy(), self.lens.numpy(), self.tables.numpy()
        slots[:n], slots[n:] = step.slots, -1
        lens[:n], lens[n:] = step.seq_lens, 1
        tables[:n, : step.block_tables.shape[1]] = step.block_tables
        tables[n:, 0] = 0
        ids = np.zeros(self.size, dtype=np.int64)
        positions = np.zeros(self.size, dtype=np.int64)
        ids[:n], positions[:n] = step.input_ids, step.positions
        hidden = model.model.embed_tokens(torch.from_numpy(ids))
        cos, sin = model.model.rotary.cos_sin(torch.from_numpy(positions), hidden.dtype)
        if self.hidden is None or self.cos is None or self.sin is None:
            self.hidden, self.cos, self.sin = hidden, cos, sin  # the first step's own
            return
        self.hidden.copy_(hidden)
        self.cos.copy_(cos)
        self.sin.copy_(sin)


class CpuDecodeGraphRunner:
    """Records and replays decode passes of a model on the CPU's C kernels."""

    def __init__(
        self,
        model: LlamaForCausalLM,
        kv_caches: list[KVCache],
        *,
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        max_batch: int = CPU_GRAPH_MAX_BATCH,
        memory_bytes: int = CPU_GRAPH_MEMORY_BYTES,
    ) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.max_blocks = -(-max_model_len // block_size)
        self.memory_bytes = memory_bytes
        self._max_batch = min(max_num_seqs, max_batch)
        self._graphs: dict[int, CpuDecodeGraph] = {}
        self._seen: set[int] = set()
        # Steps that recorded (a pass under the recorder, 50-100 ms for the demo model, a
        # few replays' worth): the scheduler's cost model leaves them out
        # (ModelRunner.one_time_steps).
        self.recording_steps = 0
        self._over_budget: set[int] = set()  # sizes whose recording would pass memory_bytes
        self._reset()

    def _reset(self) -> None:
        """Forget every recording; sizes up to what the model's passes multiply in place
        (a kept-quantized layer past its kernel's rows copies its weight each call: a
        recording would keep every layer's copy, for little)."""
        self._graphs.clear()
        self._seen.clear()
        self._over_budget.clear()
        in_place = self.model.rows_in_place()
        limit = self._max_batch if in_place is None else min(self._max_batch, in_place)
        self.sizes = cpu_graph_sizes(limit)
        self.largest = self.sizes[-1] if self.sizes else 0  # lowered where a size cannot record
        self._revision = self.model.revision

    @property
    def enabled(self) -> bool:
        return self.largest > 0

    @property
    def num_captured(self) -> int:
        return sum(graph.recording is not None for graph in self._graphs.values())

    @property
    def kept_bytes(self) -> int:
        """The scratch all recordings keep alive."""
        return sum(g.recording.scratch_bytes for g in self._graphs.values() if g.recording)

    def can_run(self, num_seqs: int, width: int) -> bool:
        """Whether a pure decode step of ``num_seqs`` with ``width``-block tables may replay."""
        return num_seqs <= self.largest and width <= self.max_blocks

    def run(self, step: StepInputs) -> torch.Tensor | None:
        """Final hidden states (n, hidden) of a pure decode step, or None to run it eagerly."""
        if self.model.revision != self._revision:  # new paths: the recordings are of the old
            self._reset()
        n = step.num_seqs
        if not step.is_pure_decode or not self.can_run(n, step.block_tables.shape[1]):
            return None
        if cascade_blocks(decode_shared_blocks(step, list(range(n))), self.block_size):
            return None
        size = padded_size(n, self.sizes)
        if size is None or size in self._over_budget:
            return None
        graph = self._graphs.get(size)
        if graph is None:
            if size not in self._seen:  # the first step of a size runs eagerly
                self._seen.add(size)
                return None
            graph = CpuDecodeGraph(size, self.max_blocks, self.block_size)
            self._graphs[size] = graph
        graph.stage(step, self.model)
        if graph.recording is None:
            return self._record(graph)[:n]
        graph.recording.replay()
        assert graph.out is not None
        return graph.out[:n]

    def _record(self, graph: CpuDecodeGraph) -> torch.Tensor:
        """Run the staged step while recording it; keep the recording where it is usable."""
        assert graph.hidden is not None and graph.cos is not None and graph.sin is not None
        self.recording_steps += 1
        with record(SCRATCH_BYTES_PER_ROW * graph.size) as recording:
            out = self.model.forward_layers(
                graph.hidden, (graph.cos, graph.sin), self.kv_caches, graph.meta
            )
        if not recording.usable:
            del self._graphs[graph.size]
            self.largest = max((size for size in self.sizes if size < graph.size), default=0)
            log.info(
                "decode steps of %d or more sequences run eagerly: a recording cannot repeat "
                "their pass (%s)",
                graph.size,
                recording.refused or "no calls",
            )
            return out
        # Replays from now on write the activations into one buffer, its bytes reused.
        (graph.out,) = compact(recording, [out])
        if self.kept_bytes + recording.scratch_bytes > self.memory_bytes:
            del self._graphs[graph.size]
            self._over_budget.add(graph.size)
            log.info(
                "decode steps of batch size %d run eagerly: their recording (%.1f MiB) would "
                "pass the %d MiB the CPU decode graphs may keep",
                graph.size,
                recording.scratch_bytes / 2**20,
                self.memory_bytes >> 20,
            )
            return out
        graph.recording = recording
        log.info(
            "recorded a CPU decode graph for batch %d: %d calls (%d of them torch ops), "
            "%.2f MiB of activations",
            graph.size,
            len(recording.calls),
            recording.torch_ops,
            recording.scratch_bytes / 2**20,
        )
        return out


def make_cpu_decode_graphs(
    model: LlamaForCausalLM,
    kv_caches: list[KVCache],
    backend: AttentionBackend[Any],
    *,
    enforce_eager: bool,
    max_num_seqs: int,
    max_model_len: int | None,
    block_size: int,
    device: torch.device,
) -> CpuDecodeGraphRunner | None:
    """A runner where one can work: the CPU, its C attention backend, not ``enforce_eager``."""
    if enforce_eager or device.type != "cpu" or max_model_len is None:
        return None
    if not isinstance(backend, CpuAttentionBackend):
        return None
    return CpuDecodeGraphRunner(
        model,
        kv_caches,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        block_size=block_size,
    )
