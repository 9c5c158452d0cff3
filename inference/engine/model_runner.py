"""The model runner: the one place that turns a scheduled batch into tensors.

It owns the KV cache tensors (one key and one value pool per layer, indexed by the block
ids the block manager hands out) and runs the model on a flat batch that mixes prefill
chunks and decodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from inference.engine.scheduler_output import SchedulerOutput
from inference.kernels.attention import AttentionMetadata, KVCache
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM


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
    ) -> None:
        self.model = model
        self.arch = arch
        self.block_size = block_size
        self.device = device
        shape = (num_blocks, block_size, arch.num_kv_heads, arch.head_dim)
        self.kv_caches: list[KVCache] = [
            (
                torch.zeros(shape, dtype=kv_dtype, device=device),
                torch.zeros(shape, dtype=kv_dtype, device=device),
            )
            for _ in range(arch.num_layers)
        ]

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
        meta = AttentionMetadata.build(
            slot_mapping=torch.from_numpy(np.concatenate(slots)).to(self.device),
            query_start_loc=query_start_loc,
            seq_lens=seq_lens,
            block_tables=torch.from_numpy(table_array).to(self.device),
            block_size=bs,
        )
        hidden = self.model(
            torch.tensor(input_ids, dtype=torch.long, device=self.device),
            torch.from_numpy(np.concatenate(positions)).to(self.device),
            self.kv_caches,
            meta,
        )
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
