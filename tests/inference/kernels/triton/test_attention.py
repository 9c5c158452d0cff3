"""The decode and chunk kernels against `TorchAttentionBackend` on ragged paged batches."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.kv_cache import FP8_KV_DTYPE
from inference.kernels.triton.backend import TritonAttentionBackend
from inference.kernels.triton.decode_attention import plan_splits, split_length

from ..paged_case import assert_close_bf16, make_case

HEAD_DIM = 32


def boundary_contexts(b: int) -> list[tuple[int, int]]:
    """(cached, new) mixes whose contexts end on and just past block boundaries."""
    return [
        (0, b + 1),  # a prompt just past a boundary
        (b - 1, 1),  # a decode whose context ends exactly on a boundary
        (b, 1),  # and just past it
        (b + 3, b - 3),  # a chunk continuing a cached prefix, ending on a boundary
    ]


@pytest.mark.parametrize("pool", ["bf16", "fp8"])
@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("group", [1, 3, 8])
def test_mixed_batch_matches_the_torch_path(group: int, block_size: int, pool: str) -> None:
    case = make_case(
        boundary_contexts(block_size),
        group=group,
        num_kv_heads=1 if group == 8 else 2,
        head_dim=HEAD_DIM,
        block_size=block_size,
        dtype=torch.bfloat16,
        pool_dtype=FP8_KV_DTYPE if pool == "fp8" else torch.bfloat16,
        seed=group * block_size,
    )
    scale = HEAD_DIM**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(TritonAttentionBackend(), scale)
    assert_close_bf16(actual, expected)


@pytest.mark.parametrize("pool", [torch.float32, FP8_KV_DTYPE])
def test_split_decode_over_many_tiles(pool: torch.dtype) -> None:
    """Long ragged decodes cut into several splits of several tiles each."""
    contexts = [(c, 1) for c in (0, 63, 64, 119)]
    case = make_case(
        contexts,
        group=3,
        num_kv_heads=1,
        head_dim=16,
        block_size=16,
        dtype=torch.float32,
        pool_dtype=pool,
        seed=5,
    )
    backend = TritonAttentionBackend(target_programs=12, decode_block_n=16)
    assert plan_splits(4, 1, 120, 16, 12) == 3  # the case really is split
    # ... each context in its own way: 0, 2, 2 and 3 splits used.
    assert [split_length(c, 3, 16) for c, _ in contexts] == [0, 32, 32, 48]
    scale = 16**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend, scale)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


def test_long_chunks_over_many_query_and_key_tiles() -> None:
    """Chunks longer than a query tile, over a cached prefix longer than a key tile."""
    case = make_case(
        [(21, 27), (0, 20), (40, 1)],
        group=2,
        num_kv_heads=2,
        head_dim=16,
        block_size=16,
        dtype=torch.float32,
        pool_dtype=torch.float32,
        seed=6,
    )
    backend = TritonAttentionBackend(chunk_block_m=16, chunk_block_n=16)
    scale = 16**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(backend, scale)
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", range(2))
def test_random_shapes(seed: int) -> None:
    gen = torch.Generator().manual_seed(100 + seed)
    contexts = [
        (
            int(torch.randint(0, 70, (1,), generator=gen)),
            int(torch.randint(1, 30, (1,), generator=gen)),
        )
        for _ in range(4)
    ]
    contexts[0] = (contexts[0][0], 1)  # at least one decode
    case = make_case(
        contexts,
        group=[3, 8][seed],
        num_kv_heads=[2, 1][seed],
        head_dim=HEAD_DIM,
        block_size=[32, 16][seed],
        dtype=torch.bfloat16,
        pool_dtype=[torch.bfloat16, FP8_KV_DTYPE][seed],
        seed=seed,
    )
    scale = HEAD_DIM**-0.5
    expected = case.attend(TorchAttentionBackend(), scale)
    actual = case.attend(TritonAttentionBackend(chunk_block_m=32, chunk_block_n=32), scale)
    assert_close_bf16(actual, expected)


def test_plan_splits_fills_the_device_and_covers_the_context() -> None:
    assert plan_splits(1, 8, 4096, 64, 528) == 64  # batch 1: one split per tile
    assert plan_splits(128, 8, 4096, 64, 528) == 1  # a full batch needs none
    assert plan_splits(1, 8, 131072, 64, 528) == 64  # a long bound: about as many as fill it
    for num_decodes, max_len in [(1, 1), (3, 100), (7, 1000), (2, 64), (1, 131072)]:
        splits = plan_splits(num_decodes, 2, max_len, 16, 64)
        for seq_len in {1, 15, 16, 17, max_len // 3 + 1, max(max_len - 1, 1), max_len}:
            length = split_length(seq_len, splits, 16)
            assert length % 16 == 0 and splits * length >= seq_len  # whole tiles, all of it
            used, tiles = -(-seq_len // length), -(-seq_len // 16)
            assert 2 * used > min(splits, tiles)  # spread over at least half it could use
        # The longest context leaves no split empty.
        assert (splits - 1) * split_length(max_len, splits, 16) < max_len


def test_a_short_context_spreads_over_a_plan_made_for_a_long_one() -> None:
    """A CUDA graph plans for max_model_len; a 500-token context still gets 8 programs."""
    splits = plan_splits(1, 8, 131072, 64, 528)
    assert split_length(500, splits, 64) == 64
    assert -(-500 // split_length(500, splits, 64)) == 8
