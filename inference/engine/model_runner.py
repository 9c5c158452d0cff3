"""The model runner: the one place that turns a scheduled batch into tensors.

It owns the KV cache tensors (one key and one value pool per layer, indexed by the block
ids the block manager hands out) and runs the model on a flat batch that mixes prefill
chunks and decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from inference.engine.cuda_graphs import DecodeInputs, make_decode_graphs
from inference.engine.scheduler_output import SchedulerOutput
from inference.kernels.attention import AttentionMetadata, KVCache
from inference.kernels.backends import make_attention_backend
from inference.kernels.cpu.backend import CpuAttentionBackend
from inference.kernels.cpu.layers import load_layer_kernels
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.parallel.messages import RunStep


@dataclass(frozen=True, slots=True)
class StepResult:
    """Logits for the scheduled sequences that sample this step, in scheduling order."""

    logits: torch.Tensor  # (num_sampling, vocab) float32
    # For sequences asking for prompt logprobs: scheduled index -> (positions, logits) where
    # logits[i] predicts token at positions[i] + 1.
    prompt_logits: dict[int, tuple[range, torch.Tensor]]


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        arch: ArchConfig,
        *,
        num_blocks: int,
        block_size: int,
        kv_dtype: torch.dtype,
        device: torch.device,
        kv_scales: list[tuple[float, float]] | None = None,
        attention_backend: str = "auto",
        enforce_eager: bool = False,
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
    ) -> None:
        """``kv_scales``: per-layer (k_scale, v_scale) of an FP8 pool (default 1.0).

        ``attention_backend`` is chosen for ``device`` (Triton on CUDA by default); decode
        steps replay CUDA graphs on CUDA unless ``enforce_eager`` (they need
        ``max_model_len`` to size their block tables).
        """
        self.model = model
        self.arch = arch
        self.block_size = block_size
        self.device = device
        shape = (num_blocks, block_size, arch.num_kv_heads, arch.head_dim)
        scales = kv_scales or [(1.0, 1.0)] * arch.num_layers
        if len(scales) != arch.num_layers:
            raise ValueError(f"need KV scales for {arch.num_layers} layers, got {len(scales)}")
        self.kv_caches: list[KVCache] = [
            KVCache(
                torch.zeros(shape, dtype=kv_dtype, device=device),
                torch.zeros(shape, dtype=kv_dtype, device=device),
                k_scale=k_scale,
                v_scale=v_scale,
            )
            for k_scale, v_scale in scales
        ]
        if device.type == "cpu":
            model.prepack_for_cpu(batch_hint=max_num_seqs)  # decode steps' rows
        self.attention_backend = make_attention_backend(attention_backend, device)
        if isinstance(self.attention_backend, CpuAttentionBackend):
            model.set_layer_kernels(load_layer_kernels())
        model.set_attention_backend(self.attention_backend)
        self.decode_graphs = make_decode_graphs(
            model,
            self.kv_caches,
            self.attention_backend,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            block_size=block_size,
            device=device,
        )
        # Set by a tensor-parallel group: sends each eager step's inputs to the other ranks.
        self.broadcast_step: Callable[[RunStep], None] | None = None

    @torch.inference_mode()
    def forward_step(self, step: RunStep) -> torch.Tensor:
        """Run the model eagerly on one step's host inputs; the final hidden states (T, hidden).

        Tensor-parallel workers call this with the `RunStep` rank 0 broadcast.
        """
        meta = AttentionMetadata.build(
            slot_mapping=torch.from_numpy(step.slots).to(self.device),
            query_start_loc=step.query_start_loc,
            seq_lens=step.seq_lens,
            block_tables=torch.from_numpy(step.block_tables).to(self.device),
            block_size=self.block_size,
        )
        hidden: torch.Tensor = self.model(
            torch.from_numpy(step.input_ids).to(self.device),
            torch.from_numpy(step.positions).to(self.device),
            self.kv_caches,
            meta,
        )
        return hidden

    @torch.inference_mode()
    def execute(self, batch: SchedulerOutput, *, want_prompt_logits: set[int]) -> StepResult:
        """Run one step. ``want_prompt_logits`` holds the seq_ids that need prompt logits."""
        input_ids: list[int] = []
        positions: list[np.ndarray] = []
        slots: list[np.ndarray] = []
        query_start_loc = [0]
        seq_lens: list[int] = []
        tables: list[list[int]] = []
        bs = self.block_size
        for item in batch.scheduled:
            seq = item.seq
            input_ids.extend(seq.token_ids[item.start : item.end])
            pos = np.arange(item.start, item.end, dtype=np.int64)
            block_ids = np.asarray(seq.block_table, dtype=np.int64)
            positions.append(pos)
            slots.append(block_ids[pos // bs] * bs + pos % bs)
            query_start_loc.append(query_start_loc[-1] + item.num_new_tokens)
            seq_lens.append(item.end)
            tables.append(seq.block_table)

        width = max(len(t) for t in tables)
        table_array = np.zeros((len(tables), width), dtype=np.int64)
        for row, table in enumerate(tables):
            table_array[row, : len(table)] = table
        hidden: torch.Tensor | None = None
        graphs = self.decode_graphs
        pure_decode = len(input_ids) == len(tables)
        if graphs is not None and pure_decode and graphs.can_run(len(tables), width):
            step = DecodeInputs(
                np.asarray(input_ids, dtype=np.int64),
                np.concatenate(positions),
                np.concatenate(slots),
                np.asarray(seq_lens, dtype=np.int64),
                table_array,
            )
            hidden = graphs.run(step)  # None: run this step eagerly after all
        if hidden is None:
            step_inputs = RunStep(
                np.asarray(input_ids, dtype=np.int64),
                np.concatenate(positions),
                np.concatenate(slots),
                query_start_loc,
                seq_lens,
                table_array,
            )
            if self.broadcast_step is not None:  # tensor parallel: the other ranks run it too
                self.broadcast_step(step_inputs)
            hidden = self.forward_step(step_inputs)
        last_rows = [query_start_loc[i + 1] - 1 for i, s in enumerate(batch.scheduled) if s.sample]
        logits = self.model.compute_logits(hidden[last_rows])

        prompt_logits: dict[int, tuple[range, torch.Tensor]] = {}
        for index, item in enumerate(batch.scheduled):
            seq = item.seq
            if seq.seq_id not in want_prompt_logits:
                continue
            # Only positions whose next token is still a prompt token.
            stop = min(item.end, seq.num_prompt_tokens - 1)
            if stop <= item.start:
                continue
            lo = query_start_loc[index]
            rows = hidden[lo : lo + (stop - item.start)]
            prompt_logits[index] = (range(item.start, stop), self.model.compute_logits(rows))
        return StepResult(logits=logits, prompt_logits=prompt_logits)
