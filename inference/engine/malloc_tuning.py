"""glibc malloc tuning for CPU inference.

A step allocates activations of a few MB each (bigger than glibc's mmap threshold), and
glibc hands each back to the kernel when freed: every step then page-faults its whole
working set in again. Measured on a 2048 x 576 bf16 RMSNorm: 4.3 ms with the defaults,
0.4 ms with large allocations kept on the heap. Raising the mmap threshold and the trim
threshold keeps freed memory for reuse, as tcmalloc or jemalloc would.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger("inference.engine")

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_MAX = 32 << 20  # glibc's cap on 64-bit
_KEEP = 1 << 30  # keep up to 1 GiB of freed heap for reuse


def keep_freed_memory_for_reuse() -> bool:
    """Tune this process's glibc malloc; False (and nothing changed) off glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = all(
        mallopt(param, value) == 1
        for param, value in (
            (_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX),
            (_M_TRIM_THRESHOLD, _KEEP),
            (_M_TOP_PAD, 64 << 20),
        )
    )
    if not ok:
        log.warning("mallopt refused a setting; CPU steps may page-fault more")
    return ok
