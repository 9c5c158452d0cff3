"""A minimal driver for our model over a paged KV cache, for tests.

Sequences get shuffled (non-contiguous) blocks so that a wrong block-table lookup shows.
"""

from __future__ import annotations

import torch

from inference.kernels.attention import AttentionMetadata, KVCache
from inference.model.llama import LlamaForCausalLM


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
        self.tables: dict[int, list[int]] = {}
        self.lengths: dict[int, int] = {}

    def _grow(self, seq: int, length: int) -> None:
        table = self.tables.setdefault(seq, [])
        while len(table) * self.block_size < length:
            table.append(int(self.free_blocks[self.next_free]))
            self.next_free += 1

    @torch.inference_mode()
    def step(self, chunks: dict[int, list[int]]) -> torch.Tensor:
        """Feed new tokens per sequence id; return logits (T, vocab) of all new tokens."""
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        starts = [0]
        seq_lens: list[int] = []
        for seq, tokens in chunks.items():
            start = self.lengths.get(seq, 0)
            end = start + len(tokens)
            self._grow(seq, end)
            table = self.tables[seq]
            for pos in range(start, end):
                slots.append(
                    table[pos // self.block_size] * self.block_size + pos % self.block_size
                )
            ids += tokens
            positions += range(start, end)
            starts.append(starts[-1] + len(tokens))
            seq_lens.append(end)
            self.lengths[seq] = end
        width = max(len(self.tables[s]) for s in chunks)
        tables = torch.zeros(len(chunks), width, dtype=torch.int64)
        for row, seq in enumerate(chunks):
            tables[row, : len(self.tables[seq])] = torch.tensor(self.tables[seq])
        meta = AttentionMetadata.build(
            torch.tensor(slots), starts, seq_lens, tables, self.block_size
        )
        hidden = self.model(torch.tensor(ids), torch.tensor(positions), self.caches, meta)
        return self.model.compute_logits(hidden)
