"""How many OpenMP threads a C kernel call asks for.

A parallel region wakes the pool's other threads, and once they have gone to sleep
(`GOMP_SPINCOUNT`, inference/openmp.py) each wake-up is a futex call and a context switch:
tens of microseconds, hundreds beside other busy processes. A decode step's elementwise
kernels work on one row of a few hundred values (the demo model's 576-wide norms), a few
microseconds of arithmetic, so below `SINGLE_THREAD_ELEMENTS` values they run on the
calling thread alone. Measured, that is a trade (docs/engine.md, "Batch-1 decode outside
the matmuls"): beside other load a decode step took 33 ms against 56 ms with every call on
all threads, on a quiet machine about 20 ms against 18 ms.
"""

from __future__ import annotations

import torch

SINGLE_THREAD_ELEMENTS = 8192


def threads_for(elements: int) -> int:
    """1 for a call over fewer than `SINGLE_THREAD_ELEMENTS` values, else torch's threads."""
    return 1 if elements < SINGLE_THREAD_ELEMENTS else torch.get_num_threads()
