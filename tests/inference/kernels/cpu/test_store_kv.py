"""The C KV cache write (kv_store.c) against the torch path's, byte for byte.

Keys and values come in as views of a fused projection (rows strided), in each model dtype
into a pool of that dtype or an FP8 one, with and without scales; every bf16 bit pattern
goes through the FP8 encoding once, NaN and infinities included.
"""

from __future__ import annotations

import pytest
import torch

from inference.kernels.attention import TorchAttentionBackend
from inference.kernels.cpu.backend import CpuAttentionBackend
from inference.kernels.cpu.build import load_kv_store, load_paged_decode
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache

BUILDS = {"native": (), "portable": ("-mno-avx512f",)}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
NUM_BLOCKS, BLOCK_SIZE = 8, 16


def backend(build: str) -> CpuAttentionBackend:
    return CpuAttentionBackend(load_paged_decode(BUILDS[build]), load_kv_store(BUILDS[build]))


def pools(dtype: torch.dtype, heads: int, dim: int, scales: tuple[float, float]) -> KVCache:
    """A cache whose every byte starts as 0x5a, so that a write to a wrong slot shows."""
    size = torch.empty((), dtype=dtype).element_size()
    shape = (NUM_BLOCKS, BLOCK_SIZE, heads, dim * size)
    key = torch.full(shape, 0x5A, dtype=torch.uint8).view(dtype)
    value = torch.full(shape, 0x5A, dtype=torch.uint8).view(dtype)
    return KVCache(key, value, k_scale=scales[0], v_scale=scales[1])


def fused_kv(values: torch.Tensor, heads: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, heads, dim) keys and values as views into one (T, q | k | v) row each."""
    tokens = values.shape[0] // 2
    fused = torch.zeros(tokens, 5 * heads * dim, dtype=values.dtype)
    fused[:, 2 * heads * dim : 3 * heads * dim] = values[:tokens].reshape(tokens, -1)
    fused[:, 4 * heads * dim :] = values[tokens:].reshape(tokens, -1)
    key = fused[:, 2 * heads * dim : 3 * heads * dim].view(tokens, heads, dim)
    value = fused[:, 4 * heads * dim :].view(tokens, heads, dim)
    return key, value


def write_both(
    build: str, key: torch.Tensor, value: torch.Tensor, pool: torch.dtype, slots: torch.Tensor,
    scales: tuple[float, float] = (1.0, 1.0),
) -> tuple[KVCache, KVCache]:  # fmt: skip
    heads, dim = key.shape[1:]
    expected, actual = pools(pool, heads, dim, scales), pools(pool, heads, dim, scales)
    TorchAttentionBackend().write_kv(key, value, expected, slots)
    backend(build).write_kv(key, value, actual, slots)
    return expected, actual


def assert_same_bytes(actual: KVCache, expected: KVCache) -> None:
    """Equal bytes; in an FP8 pool a NaN's sign aside (torch's vectorised clamp turns a NaN
    into the processor's default NaN, which is negative, and its scalar code keeps it)."""
    for a, e in zip(actual, expected, strict=True):
        a, e = a.view(torch.uint8), e.view(torch.uint8)
        if actual.is_fp8:
            a, e = (torch.where((x & 0x7F) == 0x7F, 0x7F, x) for x in (a, e))
        assert torch.equal(a, e)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("pool", ["same", "fp8", "fp8-scaled"])
def test_store_kv_writes_what_the_torch_path_writes(build: str, dtype: str, pool: str) -> None:
    gen = torch.Generator().manual_seed(0)
    tokens, heads, dim = 37, 3, 64
    values = (torch.randn(2 * tokens, heads, dim, generator=gen) * 60).to(DTYPES[dtype])
    key, value = fused_kv(values, heads, dim)
    slots = torch.randperm(NUM_BLOCKS * BLOCK_SIZE, generator=gen)[:tokens]
    pool_dtype = DTYPES[dtype] if pool == "same" else FP8_KV_DTYPE
    scales = (0.37, 2.5) if pool == "fp8-scaled" else (1.0, 1.0)
    expected, actual = write_both(build, key, value, pool_dtype, slots, scales)
    assert_same_bytes(actual, expected)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("scales", [(1.0, 1.0), (0.37, 3.1)])
def test_every_bf16_value_encodes_as_torch_does(build: str, scales: tuple[float, float]) -> None:
    """All 65536 bf16 bit patterns: subnormals, ties, overflow past 448, infinities, NaN."""
    heads, dim = 4, 64  # 256 values a token: 128 tokens of keys, 128 of values
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
    key, value = fused_kv(every.view(256, heads, dim), heads, dim)
    slots = torch.randperm(NUM_BLOCKS * BLOCK_SIZE, generator=torch.Generator().manual_seed(1))
    expected, actual = write_both(build, key, value, FP8_KV_DTYPE, slots, scales)
    assert_same_bytes(actual, expected)


@pytest.mark.parametrize("build", BUILDS)
def test_float32_ties_between_fp8_values_round_to_even(build: str) -> None:
    """Each midpoint between neighbouring e4m3fn values, and a hair either side of it."""
    codes = torch.arange(0, 0x7F, dtype=torch.uint8).view(FP8_KV_DTYPE).float()  # 0 to 448
    mid = (codes[:-1] + codes[1:]) / 2  # exact in float32
    near = torch.cat([mid, mid.nextafter(torch.tensor(0.0)), mid.nextafter(torch.tensor(1e9))])
    near = torch.cat([near, -near, torch.zeros(768 - 2 * near.numel())])  # 2 x 378 values
    key, value = fused_kv(near.view(12, 1, 64), 1, 64)
    slots = torch.arange(6)
    expected, actual = write_both(build, key, value, FP8_KV_DTYPE, slots)
    assert_same_bytes(actual, expected)


def test_padding_slots_are_skipped() -> None:
    """A slot of -1 writes nothing: the pools hold the other tokens' rows and no more."""
    values = torch.randn(8, 2, 32).bfloat16()
    key, value = fused_kv(values, 2, 32)
    slots = torch.tensor([5, -1, 17, -1])
    actual = pools(torch.bfloat16, 2, 32, (1.0, 1.0))
    backend("native").write_kv(key, value, actual, slots)
    expected = pools(torch.bfloat16, 2, 32, (1.0, 1.0))
    kept = torch.tensor([0, 2])
    TorchAttentionBackend().write_kv(key[kept], value[kept], expected, slots[kept])
    assert_same_bytes(actual, expected)


def test_a_slot_past_the_pool_writes_nothing_and_raises() -> None:
    key, value = fused_kv(torch.randn(4, 2, 32), 2, 32)
    actual = pools(torch.float32, 2, 32, (1.0, 1.0))
    untouched = pools(torch.float32, 2, 32, (1.0, 1.0))
    with pytest.raises(IndexError, match="past the pool"):
        backend("native").write_kv(key, value, actual, torch.tensor([3, NUM_BLOCKS * BLOCK_SIZE]))
    assert_same_bytes(actual, untouched)


def test_what_the_kernel_does_not_take_goes_through_torch() -> None:
    """Keys of another dtype than the pool's (neither the pool's nor FP8): torch converts."""
    key, value = fused_kv(torch.randn(6, 2, 32), 2, 32)
    slots = torch.tensor([1, 9, 30])
    expected, actual = write_both("native", key, value, torch.bfloat16, slots)
    assert_same_bytes(actual, expected)
    assert actual.key.view(-1, 2, 32)[9].float().abs().sum() > 0
