"""zeroed_pool: a KV pool that reads as zeros, is writable and aligned, in any KV dtype."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.kv_cache import FP8_KV_DTYPE, zeroed_pool

CPU = torch.device("cpu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float16, FP8_KV_DTYPE])
@pytest.mark.parametrize("blocks", [3, 2048])  # below and above glibc's mmap threshold
def test_zeroed_pool(dtype: torch.dtype, blocks: int) -> None:
    shape = (blocks, 16, 3, 64)
    pool = zeroed_pool(shape, dtype, CPU)
    assert pool.shape == shape and pool.dtype == dtype and pool.is_contiguous()
    assert pool.data_ptr() % 64 == 0
    assert not pool.float().any()
    pool[blocks - 1, 15, 2, 63] = 1.0
    pool[0, 0, 0, 0] = -2.0
    assert pool.float().sum().item() == -1.0
    pool.fill_(3.0)
    del pool
    again = zeroed_pool(shape, dtype, CPU)  # freed memory comes back zeroed
    assert not again.float().any()
