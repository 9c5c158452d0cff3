"""The decoder's elementwise layers through layers.c: one pass each instead of several ops.

A model on the CPU is handed a `CpuLayerKernels` by its device profile (`profile.py`);
its RMSNorm, SiLU-and-multiply and rotary call these for float32 and bfloat16 tensors on
the CPU, and fall back to their torch code for anything else. Each kernel rounds where the
torch code rounds (see layers.c), so both give the same results up to float32 ordering.
FP8 layers dequantize their e4m3 weights through `dequantize_fp8` (the same values as
torch's conversion, about nine times faster on the CPU), and for a few rows multiply
through `fp8_linear` (fp8_linear.py) without a dequantized copy. Group-quantized (4- and
8-bit) layers multiply through `quant` (quant_linear.py).
"""

from __future__ import annotations

import ctypes
import logging

import torch

from inference.kernels.cpu.build import KernelBuildError, load_library
from inference.kernels.cpu.fp8_linear import Fp8LinearKernel, load_fp8_linear
from inference.kernels.cpu.quant_linear import QuantLinearKernel, load_quant_linear
from inference.kernels.cpu.threads import threads_for

log = logging.getLogger("inference.kernels")

_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1}


def load_layer_kernels(extra_flags: tuple[str, ...] = ()) -> CpuLayerKernels | None:
    """The kernels, or None (logged) where layers.c cannot be built."""
    try:
        return CpuLayerKernels(
            load_library("layers", extra_flags),
            load_fp8_linear(extra_flags),
            load_quant_linear(extra_flags),
        )
    except KernelBuildError as error:
        log.warning("fused CPU layer kernels unavailable, using torch ops: %s", error)
        return None


class CpuLayerKernels:
    def __init__(
        self,
        library: ctypes.CDLL,
        fp8: Fp8LinearKernel | None = None,
        quant: QuantLinearKernel | None = None,
    ) -> None:
        self._lib = library
        self.fp8 = fp8
        self.quant = quant

    @staticmethod
    def accepts(*tensors: torch.Tensor) -> bool:
        """CPU tensors of one supported dtype whose last dimension is contiguous."""
        dtype = tensors[0].dtype
        if dtype not in _DTYPE_CODES:
            return False
        # a plain loop (all() of a generator costs more): this runs several times a layer
        for t in tensors:
            if t.dtype != dtype or t.stride(-1) != 1:
                return False
            if not t.is_cpu:  # not device.type: a string compare costs 5x more
                return False
        return True

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        """x (T, n), rows possibly strided -> (T, n) contiguous."""
        if x.dim() != 2 or not weight.is_contiguous():
            raise ValueError("rms_norm takes (T, n) rows and a contiguous weight")
        out = torch.empty(x.shape, dtype=x.dtype)
        self._lib.rms_norm(
            x.data_ptr(),
            x.stride(0),
            weight.data_ptr(),
            out.data_ptr(),
            x.shape[0],
            x.shape[1],
            eps,
            _DTYPE_CODES[x.dtype],
            threads_for(x.numel()),
        )
        return out

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x (T, n), rows possibly strided, added into ``residual`` (T, n) contiguous, in
        place; returns (the sum's norm (T, n), residual)."""
        if x.dim() != 2 or residual.shape != x.shape or not residual.is_contiguous():
            raise ValueError("add_rms_norm takes (T, n) rows and a contiguous residual of them")
        if not weight.is_contiguous():
            raise ValueError("add_rms_norm takes a contiguous weight")
        out = torch.empty(x.shape, dtype=x.dtype)
        self._lib.add_rms_norm(
            x.data_ptr(),
            x.stride(0),
            residual.data_ptr(),
            weight.data_ptr(),
            out.data_ptr(),
            x.shape[0],
            x.shape[1],
            eps,
            _DTYPE_CODES[x.dtype],
            threads_for(x.numel()),
        )
        return out, residual

    def silu_and_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """(T, 2n) holding [gate | up] -> (T, n)."""
        if gate_up.dim() != 2 or gate_up.shape[1] % 2:
            raise ValueError("silu_and_mul takes (T, 2n) rows")
        n = gate_up.shape[1] // 2
        out = torch.empty((gate_up.shape[0], n), dtype=gate_up.dtype)
        self._lib.silu_and_mul(
            gate_up.data_ptr(),
            gate_up.stride(0),
            out.data_ptr(),
            gate_up.shape[0],
            n,
            _DTYPE_CODES[gate_up.dtype],
            threads_for(gate_up.numel()),
        )
        return out

    def rotary(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        """x (T, H, D) with heads contiguous in each row; cos, sin (T, 1, D / 2) contiguous."""
        tokens, heads, dim = x.shape
        if x.stride(1) != dim or not (cos.is_contiguous() and sin.is_contiguous()):
            raise ValueError("rotary takes (T, H, D) rows of whole heads and contiguous cos/sin")
        if cos.shape != (tokens, 1, dim // 2) or sin.shape != cos.shape:
            raise ValueError(f"cos/sin must be ({tokens}, 1, {dim // 2})")
        out = torch.empty((tokens, heads, dim), dtype=x.dtype)
        self._lib.rotary(
            x.data_ptr(),
            x.stride(0),
            cos.data_ptr(),
            sin.data_ptr(),
            out.data_ptr(),
            tokens,
            heads,
            dim,
            _DTYPE_CODES[x.dtype],
            threads_for(x.numel()),
        )
        return out

    def dequantize_fp8(
        self,
        q: torch.Tensor,
        scale: torch.Tensor | None,
        dtype: torch.dtype,
        group_size: int | None = None,
    ) -> torch.Tensor | None:
        """``(q.float() * scale).to(dtype)`` for an e4m3 (rows, cols) weight, or None where
        the kernel does not take these tensors (the caller then uses torch).

        ``scale``: (rows, groups) float32, a group being ``group_size`` columns (None: one
        group per row); None for a plain conversion.
        """
        if q.dtype != torch.float8_e4m3fn or q.dim() != 2 or not q.is_contiguous():
            return None
        if dtype not in _DTYPE_CODES or q.device.type != "cpu":
            return None
        rows, cols = q.shape
        groups, size = 0, cols
        if scale is not None:
            scale = scale.reshape(rows, -1)
            if scale.dtype != torch.float32 or not scale.is_contiguous():
                return None
            groups = scale.shape[1]
            size = group_size or cols
            if groups != -(-cols // size):
                return None
        out = torch.empty((rows, cols), dtype=dtype)
        self._lib.fp8_dequantize(
            q.data_ptr(),
            0 if scale is None else scale.data_ptr(),
            rows,
            cols,
            groups,
            size,
            out.data_ptr(),
            _DTYPE_CODES[dtype],
            torch.get_num_threads(),
        )
        return out

    def fp8_linear(
        self, x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group_size: int | None
    ) -> torch.Tensor | None:
        """``x @ dequantize(q, scale).T`` without a dequantized copy (`Fp8LinearKernel`), or
        None where that kernel is missing or does not take these tensors."""
        return None if self.fp8 is None else self.fp8(x, q, scale, group_size)
