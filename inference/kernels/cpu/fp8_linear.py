"""FP8 weight-only matmul on the CPU through fp8_linear.c: the weight widened in registers.

For a decode step's rows of activations, an FP8 layer's time is reading and widening its
weight: dequantizing it whole into a bf16 copy and then multiplying (the fallback) costs
about six times as much at one row as widening each tile where it is multiplied, and
still about twice as much at 32 rows. It is built one of three ways
(`Fp8LinearKernel.path`):

- "bf16", where the processor has AVX-512 BF16 (Sapphire Rapids, the AMD EPYC): the
  dot products are `vdpbf16ps`. With hundreds of rows (prefill chunks) oneDNN's bf16
  matmul over a dequantized copy wins, so the kernel takes only up to `PER_ROW_MAX_ROWS`
  rows (per-row scales), or `GROUPED_MAX_ROWS` for grouped scales, whose dequantizing
  costs more.
- "emulated", where it does not (the Ice Lake Xeon): each pair's products are two
  float32 FMAs. oneDNN's bf16 matmul is slow there too (no bf16 instructions), and the
  kernel stayed 2.5 to 5 times faster than the fallback up to 2,048 rows, so it takes
  any number of rows.
- "avx2", without AVX-512F/BW/VL but with AVX2, FMA and F16C (AMD's EPYC before Zen 4,
  Intel before Skylake-SP): float32 products 8 lanes wide, any number of rows; torch's
  bf16 matmul has no bf16 instructions there either and the kernel stays 6-7x ahead.

Every build also takes float32 activations (a float32 model's, as `--dtype auto` picks on
a processor without bf16 arithmetic) through the AVX2 code, up to `FLOAT32_MAX_ROWS`.

Measured in docs/engine.md. Without even AVX2, FP8 layers keep the fallback.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Literal

import torch

from inference.kernels.cpu.build import KernelBuildError, load_library

log = logging.getLogger("inference.kernels")

# The most rows of bf16 x the "bf16" build takes; the others take any number.
PER_ROW_MAX_ROWS = 128
GROUPED_MAX_ROWS = 192
# The most rows of float32 x any build takes: past them oneDNN's float32 matmul over a
# dequantized copy catches up (between 256 and 1,024 rows on an AVX2 EPYC, docs/engine.md).
FLOAT32_MAX_ROWS = 256
Fp8Path = Literal["bf16", "emulated", "avx2"]
# fp8_linear_available()'s answers: which dot product the library was compiled with.
PATHS: dict[int, Fp8Path] = {1: "bf16", 2: "emulated", 3: "avx2"}


def load_fp8_linear(extra_flags: tuple[str, ...] = ()) -> Fp8LinearKernel | None:
    """The kernel, or None where it cannot be built or this processor lacks even AVX2."""
    try:
        library = load_library("fp8_linear", extra_flags)
    except KernelBuildError as error:
        log.warning("fused FP8 matmul unavailable, dequantizing instead: %s", error)
        return None
    path = PATHS.get(library.fp8_linear_available())
    if path is None:
        log.info("no AVX2 here: FP8 layers dequantize their weights, then multiply")
        return None
    return Fp8LinearKernel(library, path)


class Fp8LinearKernel:
    def __init__(self, library: ctypes.CDLL, path: Fp8Path) -> None:
        self._lib = library
        self.path = path  # which dot product fp8_linear.c was built with (see above)

    def max_rows(self, group_size: int | None, dtype: torch.dtype = torch.bfloat16) -> int | None:
        """The most rows of activations of `dtype` this build takes (None: any number)."""
        if dtype == torch.float32:
            return FLOAT32_MAX_ROWS
        if self.path != "bf16":
            return None
        return PER_ROW_MAX_ROWS if group_size is None else GROUPED_MAX_ROWS

    def __call__(
        self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int | None
    ) -> torch.Tensor | None:
        """``x @ dequantize(q, scale).T`` (T, out) in x's dtype for bf16 or float32 x (T, in)
        on the CPU, or None where the kernel does not take these tensors (the caller falls
        back). float32 x runs the AVX2 code on every build.

        ``scale``: (out,) per row (``group_size`` None) or (out, groups) of ``group_size``
        columns, float32; the weight ``q`` (out, in) e4m3, contiguous.
        """
        limit = self.max_rows(group_size, x.dtype)
        if x.dim() != 2 or x.shape[0] == 0 or x.dtype not in (torch.bfloat16, torch.float32):
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
        out = torch.empty((x.shape[0], rows), dtype=x.dtype)
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
            x.dtype == torch.float32,
            torch.get_num_threads(),
        )
        return None if failed else out
