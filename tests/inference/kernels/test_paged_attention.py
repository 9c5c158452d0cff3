"""paged_attention against a naive dense causal attention, one sequence at a time."""

from __future__ import annotations

import math

import pytest
import torch

from inference.kernels.attention import paged_attention, paged_layout, write_kv

NUM_KV_HEADS = 2
HEAD_DIM = 16


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q (n, Hq, D) are the last n positions of a context k, v (L, Hkv, D); float64 math."""
    n, num_heads, _ = q.shape
    length = k.shape[0]
    group = num_heads // k.shape[1]
    k = k.repeat_interleave(group, dim=1).double()
    v = v.repeat_interleave(group, dim=1).double()
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(q.shape[-1])
    query_pos = torch.arange(length - n, length)[:, None]
    scores = scores.masked_fill(torch.arange(length)[None, :] > query_pos, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).float()


def run_case(contexts: list[tuple[int, int]], group: int, block_size: int, seed: int = 0) -> None:
    """contexts: (cached tokens already in the cache, new tokens this step) per sequence."""
    gen = torch.Generator().manual_seed(seed)
    num_heads = NUM_KV_HEADS * group
    total_blocks = sum(-(-(c + n) // block_size) for c, n in contexts) + 3
    shape = (total_blocks, block_size, NUM_KV_HEADS, HEAD_DIM)
    cache = (torch.zeros(shape), torch.zeros(shape))
    order = torch.randperm(total_blocks, generator=gen).tolist()  # scattered blocks
    tables, slots, starts, seq_lens, queries, expected = [], [], [0], [], [], []
    for cached, new in contexts:
        length = cached + new
        table = [order.pop() for _ in range(-(-length // block_size))]
        k = torch.randn(length, NUM_KV_HEADS, HEAD_DIM, generator=gen)
        v = torch.randn(length, NUM_KV_HEADS, HEAD_DIM, generator=gen)
        q = torch.randn(new, num_heads, HEAD_DIM, generator=gen)
        all_slots = torch.tensor(
            [table[p // block_size] * block_size + p % block_size for p in range(length)]
        )
        # The earlier context is already cached; the new tokens' keys are written with them.
        write_kv(k[:cached], v[:cached], cache, all_slots[:cached])
        write_kv(k[cached:], v[cached:], cache, all_slots[cached:])
        tables.append(table)
        slots.append(all_slots[cached:])
        starts.append(starts[-1] + new)
        seq_lens.append(length)
        queries.append(q)
        expected.append(naive_attention(q, k, v))
    width = max(len(t) for t in tables)
    block_tables = torch.zeros(len(tables), width, dtype=torch.int64)
    for row, table in enumerate(tables):
        block_tables[row, : len(table)] = torch.tensor(table)
    layout = paged_layout(torch.cat(slots), starts, seq_lens, block_tables, block_size)
    out = paged_attention(torch.cat(queries), cache, layout, HEAD_DIM**-0.5)
    torch.testing.assert_close(out, torch.cat(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("group", [1, 3, 8])
def test_ragged_prefill_and_decode_mix(group: int, block_size: int) -> None:
    b = block_size
    contexts = [
        (0, 5),  # short first prefill
        (0, b),  # prompt ending exactly on a block boundary
        (0, b + 1),  # and just past it
        (b - 1, 1),  # decode whose context ends exactly on a boundary
        (b, 1),  # decode just past it
        (2 * b + 3, 7),  # chunked prefill continuing a cached context
        (b + 5, 1),
    ]
    run_case(contexts, group, block_size)


@pytest.mark.parametrize("group", [1, 3, 8])
def test_decode_only_batch(group: int) -> None:
    run_case([(c, 1) for c in (0, 15, 16, 31, 47, 2)], group, block_size=16, seed=1)


@pytest.mark.parametrize("seed", range(3))
def test_random_shapes(seed: int) -> None:
    gen = torch.Generator().manual_seed(100 + seed)
    contexts = [
        (
            int(torch.randint(0, 70, (1,), generator=gen)),
            int(torch.randint(1, 40, (1,), generator=gen)),
        )
        for _ in range(5)
    ]
    run_case(contexts, group=[1, 3, 8][seed], block_size=[16, 32, 16][seed], seed=seed)


def test_layout_rejects_context_beyond_block_table() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        paged_layout([0], [0, 1], [17], [[0]], 16)
