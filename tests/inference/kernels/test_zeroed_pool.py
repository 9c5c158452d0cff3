"""zeroed_pool: a KV pool that reads as zeros, is writable and aligned, in any KV dtype."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from inference.engine.malloc_tuning import keep_freed_memory_for_reuse
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


def _resident_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux's /proc")
def test_a_pool_takes_no_memory_until_written() -> None:
    # In a thread, as the worker's loader allocates it (glibc's calloc in a thread's arena
    # clears every byte of a pool below its mmap threshold: 30 MB would then be resident).
    keep_freed_memory_for_reuse()  # as the engine does: glibc's mmap threshold at 32 MB
    pools: list[torch.Tensor] = []
    before = _resident_mb()
    thread = threading.Thread(
        target=lambda: pools.extend(
            zeroed_pool((512, 16, 8, 64), torch.bfloat16, CPU) for _ in range(8)
        )
    )
    thread.start()
    thread.join()
    assert len(pools) == 8  # 8 MB each
    assert _resident_mb() - before < 16
    pools[0].fill_(1.0)
    assert _resident_mb() - before > 6
