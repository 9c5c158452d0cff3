"""FP8 (e4m3) weights as numbers: quantizing, dequantizing, and the matmul over grouped
scales that the FP8 layers (`fp8.py`, `fp8_embedding.py`) run.

A row's (or a group of its columns') largest value maps to 448, e4m3's largest, so it is
stored exactly; the scale is float32. Dequantizing is ``q.float() * scale`` rounded once
to the activation dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from inference.model.quant.group_lazy import AnyGroupQuantized, LazyGroupQuantized
from inference.model.quant.group_math import GroupQuantized, dequantize

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = float(torch.finfo(FP8_DTYPE).max)  # 448
# Smallest scale used: an all-zero row would otherwise divide by zero.
MIN_SCALE = 1e-12
# A grouped layer dequantizes at most this many weight values at a time.
DEQUANT_SLICE_ELEMENTS = 1 << 24
# Quantizing while loading works through this many values of a tensor at a time (a slice's
# float32 copies, about 1 MB each, are what a load holds beside the model).
QUANTIZE_SLICE_ELEMENTS = 1 << 18


def quantize_weight_fp8(
    weight: torch.Tensor, group_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out, in) weight -> (e4m3 weight (out, in), float32 scale).

    The scale is per row, (out,), or with `group_size` per row and group of that many
    input columns, (out, ceil(in / group_size)); each row's (group's) largest value maps
    to 448, so it is stored exactly.
    """
    if weight.dim() != 2:
        raise ValueError(f"expected a 2-D weight, got shape {tuple(weight.shape)}")
    w = weight.float()
    if group_size is None:
        scale = (w.abs().amax(dim=1) / FP8_MAX).clamp(min=MIN_SCALE)
        return (w / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale
    if group_size <= 0:
        raise ValueError(f"group_size must be positive, got {group_size}")
    out, cols = w.shape
    groups = -(-cols // group_size)
    padded = F.pad(w, (0, groups * group_size - cols)).view(out, groups, group_size)
    scale = (padded.abs().amax(dim=2) / FP8_MAX).clamp(min=MIN_SCALE)
    q = (w / expand_scale(scale, cols, group_size)).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return q, scale


def quantize_rows_into(
    source: torch.Tensor | AnyGroupQuantized,
    dtype: torch.dtype,
    q: torch.Tensor,
    scale: torch.Tensor,
    group_size: int | None = None,
) -> None:
    """Quantize a checkpoint tensor into the e4m3 rows ``q`` and their scales ``scale``,
    as `quantize_weight_fp8` would quantize it once copied into a ``dtype`` weight: bit for
    bit, since every step is row-local. It works through QUANTIZE_SLICE_ELEMENTS values
    at a time, so the float32 working copies stay small beside the source tensor; a GGUF
    block tensor (`LazyGroupQuantized`) is read from the file and dequantized a slice at a
    time too, never whole."""
    if tuple(source.shape) != tuple(q.shape):
        raise ValueError(f"expected a weight of shape {tuple(q.shape)}, got {tuple(source.shape)}")
    if isinstance(source, torch.Tensor) and (
        not source.is_floating_point() or source.dtype == FP8_DTYPE
    ):
        raise ValueError(f"cannot quantize a {source.dtype} tensor from a float checkpoint")
    # Imported here: the loader's package imports this module.
    from inference.model.loader.memory import release_freed_memory

    rows = max(1, QUANTIZE_SLICE_ELEMENTS // max(1, q.shape[1]))
    for where, part in _float_slices(source, rows):
        part_q, part_scale = quantize_weight_fp8(part.to(device=q.device, dtype=dtype), group_size)
        q.view(torch.uint8)[where] = part_q.view(torch.uint8)  # bytes: rows may be permuted
        scale[where] = part_scale
        del part, part_q, part_scale
        # Each slice's float32 copies go back to the system before the next: left in
        # glibc's heap, a tensor's slices piled up to 13-20 MB beside it (docs/engine.md).
        release_freed_memory(collect=False)


def _float_slices(
    source: torch.Tensor | AnyGroupQuantized, rows: int
) -> Iterator[tuple[slice | torch.Tensor, torch.Tensor]]:
    """(destination rows, their values) ``rows`` at a time (a lazy source: at most)."""
    if isinstance(source, LazyGroupQuantized):
        for where, packed in source.chunks(max_values=rows * source.cols):
            yield where, dequantize(packed)
        return
    for start in range(0, source.shape[0], rows):
        where = slice(start, start + rows)
        if isinstance(source, GroupQuantized):
            yield where, dequantize(source.select_rows(where))
        else:
            yield where, source[where]


def quantize_tokens_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Activations (M, K) -> (e4m3 (M, K), float32 scales (M, 1)): each token (row) under
    its own scale, max(amax / 448, MIN_SCALE), for ``torch._scaled_mm``.

    The torch ops of `inference/kernels/triton/fp8_quant.py`'s kernel, bit for bit: both
    quotients are correctly rounded float32 (the amax one worked in float64, since CUDA
    torch multiplies by the reciprocal of a Python-number divisor).
    """
    scale = (x.abs().amax(dim=1, keepdim=True).double() / FP8_MAX).float().clamp(min=MIN_SCALE)
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scale


def expand_scale(scale: torch.Tensor, cols: int, group_size: int | None) -> torch.Tensor:
    """A (rows,) scale, or a (rows, groups) one of `group_size` columns each, as (rows, cols)
    (broadcast along the columns for the per-row case)."""
    if group_size is None:
        return scale[:, None]
    return scale.repeat_interleave(group_size, dim=1)[:, :cols]


def dequantize_weight_fp8(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype, group_size: int | None = None
) -> torch.Tensor:
    """The inverse of `quantize_weight_fp8`, in `dtype`."""
    rows, cols = q.shape
    if group_size is not None and cols % group_size == 0:  # no expanded copy of the scale
        grouped = q.float().view(rows, -1, group_size) * scale.float()[:, :, None]
        return grouped.view(rows, cols).to(dtype)
    return (q.float() * expand_scale(scale.float(), cols, group_size)).to(dtype)


class GroupedFp8Matmul:
    """``x @ dequantize(q, scale).T`` for grouped scales, as a layer runs it: the Triton
    kernel (`inference/kernels/triton/fp8_matmul.py`) where the device profile found it
    runs (`use_triton`, decided once), `grouped_fp8_linear` otherwise. With ``kernels``
    set (the CPU's fused kernels), weights are dequantized by them instead of by torch's
    conversion."""

    def __init__(self) -> None:
        self.kernels: CpuLayerKernels | None = None
        self._triton: Callable[..., torch.Tensor] | None = None

    def use_triton(self, enabled: bool) -> None:
        """Take the Triton kernel for every call (only where a probe found that it runs)."""
        self._triton = None
        if enabled:
            from inference.kernels.triton.fp8_matmul import grouped_fp8_matmul

            self._triton = grouped_fp8_matmul

    def __call__(
        self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int
    ) -> torch.Tensor:
        if self._triton is not None:
            return self._triton(x, q, scale, group_size)
        fused = self.fused(x, q, scale, group_size)
        if fused is not None:
            return fused
        return grouped_fp8_linear(x, q, scale, group_size, self.dequantize)

    def fused(
        self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int | None
    ) -> torch.Tensor | None:
        """The CPU kernels' matmul straight from FP8, or None where not taken (no kernel,
        or tensors it declines: see `Fp8LinearKernel`)."""
        if self.kernels is None:
            return None
        return self.kernels.fp8_linear(x, q, scale, group_size)

    def dequantize(
        self,
        q: torch.Tensor,
        scale: torch.Tensor | None,
        dtype: torch.dtype,
        group_size: int | None = None,
    ) -> torch.Tensor:
        """`dequantize_weight_fp8` (``scale`` None: only the conversion to ``dtype``)."""
        if self.kernels is not None:
            fast = self.kernels.dequantize_fp8(q, scale, dtype, group_size)
            if fast is not None:
                return fast
        if scale is None:
            return q.to(dtype)
        return dequantize_weight_fp8(q, scale, dtype, group_size)


def grouped_fp8_linear(
    x: torch.Tensor,
    q: torch.Tensor,
    scale: torch.Tensor,
    group_size: int,
    dequantize: Callable[..., torch.Tensor] = dequantize_weight_fp8,
) -> torch.Tensor:
    """``x @ dequantize(q, scale).T`` for a grouped scale, (..., in) -> (..., out).

    The weight is dequantized in slices of rows, so a large one (a vocabulary-sized output
    projection) never exists whole in the activation dtype.
    """
    rows = max(1, DEQUANT_SLICE_ELEMENTS // q.shape[1])
    if rows >= q.shape[0]:
        return F.linear(x, dequantize(q, scale, x.dtype, group_size))
    parts = [
        F.linear(x, dequantize(q[i : i + rows], s, x.dtype, group_size))
        for i, s in zip(range(0, q.shape[0], rows), scale.split(rows), strict=True)
    ]
    return torch.cat(parts, dim=-1)
