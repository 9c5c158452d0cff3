"""FP8 weight-only matmul on the CPU through fp8_linear.c: the weight widened in registers.

For a decode step's rows of activations, an FP8 layer's time is reading and widening its
weight: dequantizing it whole into a bf16 copy and then multiplying (the fallback) costs
about six times as much at one row as widening each tile where it is multiplied, and
still about twice as much at 32 rows. It needs AVX-512F, BW and VL, and is built one of
two ways (`Fp8LinearKernel.path`):

- "bf16", where the processor has AVX-512 BF16 (Sapphire Rapids, the AMD EPYC): the
  dot products are `vdpbf16ps`. With hundreds of rows (prefill chunks) oneDNN's bf16
  matmul over a dequantized copy wins, so the kernel takes only up to `PER_ROW_MAX_ROWS`
  rows (per-row scales), or `GROUPED_MAX_ROWS` for grouped scales, whose dequantizing
  costs more.
- "emulated", where it does not (the Ice Lake Xeon): each pair's products are two
  float32 FMAs. oneDNN's bf16 matmul is slow there too (no bf16 instructions), and the
  kernel stayed 2.5 to 5 times faster than the fallback up to 2,048 rows, so it takes
  any number of rows.

Measured in docs/engine.md. Without AVX-512 (AVX2 only), FP8 layers keep the fallback.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Literal

import torch

from inference.kernels.cpu.build import KernelBuildError, load_library

log = logging.getLogger("inference.kernels")

# The most rows the "bf16" build takes; the "emulated" one takes any number.
PER_ROW_MAX_ROWS = 128
GROUPED_MAX_ROWS = 192
Fp8Path = Literal["bf16", "emulated"]
# fp8_linear_available()'s answers: which dot product the library was compiled with.
PATHS: dict[int, Fp8Path] = {1: "bf16", 2: "emulated"}


def load_fp8_linear(extra_flags: tuple[str, ...] = ()) -> Fp8LinearKernel | None:
    """The kernel, or None where it cannot be built or this processor lacks AVX-512F/BW/VL."""
    try:
        library = load_library("fp8_linear", extra_flags)
    except KernelBuildError as error:
        log.warning("fused FP8 matmul unavailable, dequantizing instead: %s", error)
        return None
    path = PATHS.get(library.fp8_linear_available())
    if path is None:
        log.info("no AVX-512 here: FP8 layers dequantize their weights, then multiply")
        return None
    return Fp8LinearKernel(library, path)


class Fp8LinearKernel:
    def __init__(self, library: ctypes.CDLL, path: Fp8Path) -> None:
        self._lib = library
        self.path = path  # "bf16" or "emulated": which dot product fp8_linear.c was built with

    def max_rows(self, group_size: int | None) -> int | None:
        """The most rows of activations this build takes (None: any number)."""
        if self.path == "emulated":
            return None
        return PER_ROW_MAX_ROWS if group_size is None else GROUPED_MAX_ROWS

    def __call__(
        self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int | None
    ) -> torch.Tensor | None:
        """``x @ dequantize(q, scale).T`` as bf16 (T, out) for bf16 x (T, in) on the CPU,
        or None where the kernel does not take these tensors (the caller falls back).

        ``scale``: (out,) per row (``group_size`` None) or (out, groups) of ``group_size``
        columns, float32; the weight ``q`` (out, in) e4m3, contiguous.
        """
        limit = self.max_rows(group_size)
        if x.dim() != 2 or x.shape[0] == 0 or x.dtype != torch.bfloat16:
            return None
        if limit is not None and x.shape[0] > limit:
            return None
        if x.stride(1) != 1 or not x.is_cpu or scale.dtype != torch.float32:
            return None
        if q.dtype != torch.float8_e4m3fn or q.dim() != 2 or not q.is_contiguous():
            return None
        rows, cols = q.shape
        if cols != x.shape[1] or not scale.is_contiguous():
            return None
        if group_size is None:
            if scale.numel() != rows:
                return None
            groups, size = 0, cols
        else:
            groups, size = -(-cols // group_size), group_size
            if group_size % 16 or scale.shape != (rows, groups):
                return None
        out = torch.empty((x.shape[0], rows), dtype=torch.bfloat16)
        failed = self._lib.fp8_linear(
            x.data_ptr(),
            x.stride(0),
            x.shape[0],
            q.data_ptr(),
            scale.data_ptr(),
            rows,
            cols,
            groups,
            size,
            out.data_ptr(),
            torch.get_num_threads(),
        )
        return None if failed else out
