"""Give the heap's freed pages back to the system after a load.

Loading passes every tensor through short-lived buffers (a GGUF block copy, a float32
slice being quantized...). glibc keeps what they freed in its heap for later use; for a
kept-quantized SmolLM2 that is about 65 MB, more than half the model itself (measured in
docs/engine.md), and a serving process never needs it again. `malloc_trim` returns it,
after each tensor (so the next one's buffers do not pile up beside it) and at the end.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None under another C library (musl, macOS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


def release_freed_memory(*, collect: bool = True) -> bool:
    """Return the heap's free pages to the system where glibc can (True if it could),
    after collecting garbage unless ``collect`` is False (between two tensors of a load,
    where a collection would cost more than the few cycles it could free)."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
