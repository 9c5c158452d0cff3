"""reshape_and_cache against the torch path's write, for every pool dtype."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.kv_cache import FP8_KV_DTYPE
from inference.kernels.triton.backend import TritonAttentionBackend
from inference.kernels.triton.kv_write import reshape_and_cache

from ..paged_case import K_SCALE, V_SCALE, empty_cache

NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM = 6, 16, 2, 24  # head_dim not a power of two


def new_kv(num_tokens: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    # key and value as strided views of one fused projection, as the model hands them over.
    qkv = torch.randn(num_tokens, 3 * NUM_KV_HEADS * HEAD_DIM, generator=gen).to(dtype)
    key = qkv[:, NUM_KV_HEADS * HEAD_DIM : 2 * NUM_KV_HEADS * HEAD_DIM]
    value = qkv[:, 2 * NUM_KV_HEADS * HEAD_DIM :]
    shape = (num_tokens, NUM_KV_HEADS, HEAD_DIM)
    return key.view(shape), value.view(shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_model_dtype_pools_match_the_torch_path_exactly(dtype: torch.dtype) -> None:
    key, value = new_kv(9, dtype, seed=1)
    slots = torch.tensor([5, 17, 16, 15, 95, 40, 41, 0, 63])  # scattered, on block edges
    expected = empty_cache(NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, dtype)
    actual = empty_cache(NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, dtype)
    TorchAttentionBackend().write_kv(key, value, expected, slots)
    TritonAttentionBackend().write_kv(key, value, actual, slots)
    assert torch.equal(actual[0], expected[0]) and torch.equal(actual[1], expected[1])
    assert actual[0].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_pools_store_scaled_clamped_e4m3(dtype: torch.dtype) -> None:
    key, value = new_kv(12, dtype, seed=2)
    key[0, 0, :4] = torch.tensor([1e4, -1e4, 448 * K_SCALE, 0.0])  # beyond e4m3: clamped
    # Too small for e4m3 (-0 keeps its sign bit), and subnormals: 3 and 7 units of 2**-9.
    key[0, 0, 4:7] = torch.tensor([-1e-7, 3 * 2**-9, -7 * 2**-9]) * K_SCALE
    slots = torch.randperm(NUM_BLOCKS * BLOCK_SIZE)[:12]
    expected = empty_cache(NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, FP8_KV_DTYPE)
    actual = empty_cache(NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, FP8_KV_DTYPE)
    TorchAttentionBackend().write_kv(key, value, expected, slots)
    TritonAttentionBackend().write_kv(key, value, actual, slots)
    for got, want in zip(actual, expected, strict=True):
        assert torch.isfinite(got.float()).all()
        # Both divide in float32 (IEEE), then round once to nearest even: the same bytes.
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    stored_key = actual[0].view(-1, NUM_KV_HEADS, HEAD_DIM)[slots[0], 0, :7]
    assert stored_key.view(torch.uint8).tolist() == [0x7E, 0xFE, 0x7E, 0x00, 0x80, 0x03, 0x87]
    dequantized = actual[1].view(-1, NUM_KV_HEADS, HEAD_DIM)[slots].float() * V_SCALE
    torch.testing.assert_close(dequantized, value.float(), rtol=0.07, atol=V_SCALE * 2**-6)


def test_negative_slots_are_skipped() -> None:
    key, value = new_kv(3, torch.float32, seed=3)
    cache = empty_cache(NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_DIM, torch.float32)
    reshape_and_cache(key, value, cache[0], cache[1], torch.tensor([-1, 7, -1]))
    flat = cache[0].view(-1, NUM_KV_HEADS, HEAD_DIM)
    assert torch.equal(flat[7], key[1])
    assert int((flat.abs().sum(dim=(1, 2)) > 0).sum()) == 1
