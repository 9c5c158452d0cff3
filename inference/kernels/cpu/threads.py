"""How many OpenMP threads a C kernel call asks for.

A parallel region wakes the pool's other threads. Alone on its cores that is cheap: they
are still spinning from the region before (`GOMP_SPINCOUNT`, inference/openmp.py), and
every call of a decode step keeping them busy keeps them spinning. Beside other busy
processes a wake-up is a futex call and a context switch, hundreds of microseconds, and a
decode step's elementwise kernels (one row of a few hundred values, a few microseconds of
arithmetic) pay it dozens of times. So the engine can run calls over fewer than
`SMALL_CALL_ELEMENTS` values on the calling thread (`--single-thread-small-kernels`), off by
default. Measured both ways (docs/engine.md, "Batch-1 decode outside the matmuls"): beside
other load a SmolLM2 decode step took 33 ms with it against 56 ms without; alone on the
machine it made batch-1 decode 15-25% slower (the pool fell asleep between the matmuls,
each of which then woke it).
"""

from __future__ import annotations

import torch

SMALL_CALL_ELEMENTS = 8192
_single_thread_below = 0  # calls over fewer values run on the calling thread


def single_thread_small_kernels(enabled: bool) -> None:
    """Run calls over fewer than `SMALL_CALL_ELEMENTS` values on the calling thread, or
    every call on torch's threads (the default). Process-wide: the engine sets it at load."""
    global _single_thread_below
    _single_thread_below = SMALL_CALL_ELEMENTS if enabled else 0


def threads_for(elements: int) -> int:
    """1 for a small call when `single_thread_small_kernels` is on, else torch's threads."""
    return 1 if elements < _single_thread_below else torch.get_num_threads()
