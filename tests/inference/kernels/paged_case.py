"""Random paged-cache cases shared by the kernel tests, with the torch path as reference."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from inference.kernels.attention import (
    AttentionBackend,
    PagedLayout,
    TorchAttentionBackend,
    paged_layout,
)
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache

K_SCALE, V_SCALE = 0.05, 0.04  # FP8 scales that keep unit-normal values well inside e4m3


def empty_cache(
    num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int, pool_dtype: torch.dtype
) -> KVCache:
    shape = (num_blocks, block_size, num_kv_heads, head_dim)
    fp8 = pool_dtype == FP8_KV_DTYPE
    return KVCache(
        torch.zeros(shape, dtype=pool_dtype),
        torch.zeros(shape, dtype=pool_dtype),
        k_scale=K_SCALE if fp8 else 1.0,
        v_scale=V_SCALE if fp8 else 1.0,
    )


@dataclass
class PagedCase:
    """A step over scattered blocks: every sequence's context already sits in ``cache``."""

    query: torch.Tensor  # (T, Hq, D)
    keys: torch.Tensor  # (T, Hkv, D): the step's new keys (already in the cache too)
    values: torch.Tensor
    cache: KVCache
    layout: PagedLayout

    def attend(
        self, backend: AttentionBackend[Any], scale: float, query: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``backend``'s attention for this step, from the metadata it builds itself."""
        meta = backend.build_metadata(self.layout, self.cache[0].device)
        return backend.forward(self.query if query is None else query, self.cache, meta, scale)


def make_case(
    contexts: list[tuple[int, int]],
    *,
    group: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype,
    pool_dtype: torch.dtype,
    seed: int = 0,
    shared_blocks: int = 0,
) -> PagedCase:
    """contexts: (tokens cached before this step, new tokens this step) per sequence.

    ``shared_blocks``: every sequence's first blocks are the same blocks, holding the same
    keys and values (a cached prompt prefix); each context must fill them.
    """
    gen = torch.Generator().manual_seed(seed)
    num_blocks = sum(-(-(c + n) // block_size) for c, n in contexts) + 2
    cache = empty_cache(num_blocks, block_size, num_kv_heads, head_dim, pool_dtype)
    order = torch.randperm(num_blocks, generator=gen).tolist()  # scattered blocks
    shared_len = shared_blocks * block_size
    shared_table = [order.pop() for _ in range(shared_blocks)]
    shared_k = torch.randn(shared_len, num_kv_heads, head_dim, generator=gen).to(dtype)
    shared_v = torch.randn(shared_len, num_kv_heads, head_dim, generator=gen).to(dtype)
    tables, new_slots, starts, seq_lens = [], [], [0], []
    queries, new_keys, new_values = [], [], []
    for cached, new in contexts:
        length = cached + new
        if length < shared_len:
            raise ValueError(f"a context of {length} does not fill the shared blocks")
        own_blocks = -(-length // block_size) - shared_blocks
        table = shared_table + [order.pop() for _ in range(own_blocks)]
        own = (length - shared_len, num_kv_heads, head_dim)
        k = torch.cat([shared_k, torch.randn(own, generator=gen).to(dtype)])
        v = torch.cat([shared_v, torch.randn(own, generator=gen).to(dtype)])
        slots = torch.tensor(
            [table[p // block_size] * block_size + p % block_size for p in range(length)]
        )
        TorchAttentionBackend().write_kv(k, v, cache, slots)
        queries.append(torch.randn(new, num_kv_heads * group, head_dim, generator=gen).to(dtype))
        new_keys.append(k[cached:])
        new_values.append(v[cached:])
        tables.append(table)
        new_slots.append(slots[cached:])
        starts.append(starts[-1] + new)
        seq_lens.append(length)
    block_tables = torch.zeros(len(tables), max(len(t) for t in tables), dtype=torch.int64)
    for row, table in enumerate(tables):
        block_tables[row, : len(table)] = torch.tensor(table)
    layout = paged_layout(torch.cat(new_slots), starts, seq_lens, block_tables, block_size)
    return PagedCase(torch.cat(queries), torch.cat(new_keys), torch.cat(new_values), cache, layout)


def assert_close_bf16(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Within bfloat16 tolerance, relative to the output's scale."""
    actual, expected = actual.float(), expected.float()
    scale = expected.abs().max().clamp_min(1e-6)
    error = (actual - expected).abs().max() / scale
    assert error < 2e-2, f"max error {error:.3e} of the output's scale"
