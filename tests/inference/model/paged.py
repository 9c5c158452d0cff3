"""A minimal driver for our model over a paged KV cache, for tests.

Sequences get shuffled (non-contiguous) blocks so that a wrong block-table lookup shows.
A step's inputs come from the engine's own `prepare_step`, as in the model runner.
"""

from __future__ import annotations

import torch

from inference.engine.scheduler_output import ScheduledSequence, SchedulerOutput
from inference.engine.sequence import Sequence
from inference.engine.step_inputs import prepare_step
from inference.kernels.attention import KVCache, TorchAttentionBackend
from inference.model.llama import LlamaForCausalLM
from inference.sampling.params import SamplingParams


class PagedDriver:
    def __init__(self, model: LlamaForCausalLM, *, block_size: int = 16, num_blocks: int = 64):
        config = model.config
        self.model = model
        self.block_size = block_size
        shape = (num_blocks, block_size, config.num_kv_heads, config.head_dim)
        self.caches: list[KVCache] = [
            (torch.zeros(shape), torch.zeros(shape)) for _ in range(config.num_layers)
        ]
        self.free_blocks = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(3))
        self.next_free = 0
        self.seqs: dict[int, Sequence] = {}

    def _grow(self, seq: Sequence, length: int) -> None:
        while len(seq.block_table) * self.block_size < length:
            seq.block_table.append(int(self.free_blocks[self.next_free]))
            self.next_free += 1

    @torch.inference_mode()
    def step(self, chunks: dict[int, list[int]]) -> torch.Tensor:
        """Feed new tokens per sequence id; return logits (T, vocab) of all new tokens."""
        batch = SchedulerOutput()
        for seq_id, tokens in chunks.items():
            seq = self.seqs.setdefault(seq_id, Sequence(str(seq_id), [], SamplingParams()))
            start = len(seq.token_ids)
            seq.token_ids.extend(tokens)
            self._grow(seq, len(seq.token_ids))
            batch.scheduled.append(ScheduledSequence(seq, start, len(tokens), sample=True))
        step = prepare_step(batch, self.block_size)
        meta = TorchAttentionBackend().build_metadata(step, torch.device("cpu"))
        hidden = self.model(
            torch.from_numpy(step.input_ids), torch.from_numpy(step.positions), self.caches, meta
        )
        return self.model.compute_logits(hidden)
