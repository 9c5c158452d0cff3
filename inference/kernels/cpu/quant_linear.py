"""Group-quantized (4- and 8-bit) matmul on the CPU through quant_linear.c.

At a decode step's few rows of activations a quantized layer's time is reading its
weight, and the kernel reads it as packed codes (a quarter or half of bf16's bytes),
widening each block of 32 in registers. With many rows (a prefill chunk) it would
multiply in plain float32 FMAs, so from `MAX_KERNEL_ROWS` rows on the layer instead
dequantizes the weight once (`dequantize`, also in C) and runs one torch matmul.

Built for the processor (`path`): "avx512" (AVX-512 F/BW/VL with FMA and F16C), "avx2"
(AVX2, FMA and F16C: every x86-64 server since 2013), plain C elsewhere ("portable").

`matmul_int8` is the other arithmetic (quant_linear_q8.c, `int8_path` "avx512-vnni",
"avx2" or "portable"): x quantized to int8 per block of 32 and integer dot products, as
llama.cpp multiplies its Q4_1 by Q8_1. It is faster but not the float32 matmul (its
error is measured in docs/engine.md), so layers use it only where asked to. It quantizes x
once a call and multiplies in register tiles of 4 rows of x by 2 weight rows, so one read
of a weight row serves many rows of x: it beats dequantize-then-matmul up to
`int8_max_rows` rows (with VNNI or AVX2 a batch of 32 decode steps), where the exact kernel
stops below 16. With VNNI or AVX2 a weight whose rows are whole tiles of 16 can also be
bound interleaved (`bind(..., interleave=True)`, `interleave_rows`: 16 rows in a vector's
lanes, AVX2's two vectors, quant_linear_q8_il.h), the same sums 1.2-3x faster in cache and
a decode batch's step up to 2x faster; a layer with int8 activations binds so, keeping the
file's layout beside it for its other paths. That layout's kernel beats the layer's
fallback at any number of rows (VNNI the bf16 one, AVX2 the float32 one), so it takes a
prompt's rows too, except beside AMX (`interleaved_max_rows`).
"""

from __future__ import annotations

import ctypes
import logging
from typing import TYPE_CHECKING, Literal

import torch

from inference.kernels.cpu.build import KernelBuildError, load_library
from inference.kernels.cpu.features import torch_has_amx

if TYPE_CHECKING:
    from inference.model.quant.group_math import GroupQuantized

log = logging.getLogger("inference.kernels")

QuantPath = Literal["avx512", "avx2", "portable"]
PATHS: dict[int, QuantPath] = {2: "avx512", 1: "avx2", 0: "portable"}
Int8Path = Literal["avx512-vnni", "avx2", "portable"]
INT8_PATHS: dict[int, Int8Path] = {2: "avx512-vnni", 1: "avx2", 0: "portable"}
# Rows of x from which a dequantized copy and one matmul beat the kernel (measured in
# docs/engine.md, "Group-quantized weights").
MAX_KERNEL_ROWS = 16
# The most rows of x for which each int8 build is worth calling rather than the layer's
# fallback (dequantize in C, then oneDNN's bf16 matmul), from scripts/bench_quant_linear.py's
# row sweep on SmolLM2's shapes at 2 threads on Sapphire Rapids (docs/engine.md, "Int8
# activations"): VNNI wins at 32 rows on every 4-bit shape, ties 8-bit layers and takes
# the 8-bit vocabulary at a third of the time. AVX2, on an AVX2-only Zen 3 against its
# float32 fallback (the dtype `auto` picks there), with the pair-step tiles: 0.61-0.66x the
# fallback's time at 24 rows, 0.70-0.73x at 32, 0.89-0.94x at 48 (docs/engine.md, "AVX2: a
# pair of blocks a step"). Plain C keeps the limit it had (below 16).
INT8_MAX_ROWS: dict[Int8Path, int] = {"avx512-vnni": 32, "avx2": 32, "portable": 15}
MAX_INT8_KERNEL_ROWS = max(INT8_MAX_ROWS.values())
# The weight rows quant_linear_q8_il.h puts side by side in one vector (AVX2: in two).
INTERLEAVED_ROWS = 16
# The int8 builds with a kernel over that layout.
INTERLEAVED_PATHS: tuple[Int8Path, ...] = ("avx512-vnni", "avx2")
# The most rows of x a weight bound interleaved multiplies with int8 activations (None: any).
# Both builds take every row, a prompt's too: with x packed for the tiles the kernel beats
# the layer's fallback (dequantize, then oneDNN) at every row count. VNNI on a Zen 4 (against
# the bf16 fallback, SmolLM2's four layer shapes summed): 3.5x at 64 rows, 1.6-1.7x at 512,
# 1.4-1.5x at 2,048 (docs/engine.md, "Zen 4: x packed, prompts through the int8 kernel").
# AVX2 on a Zen 3 (against float32, the dtype `auto` picks there): 1.5-1.7x at
# 2,048 rows, 1.8-2.2x at 512 (docs/engine.md, "AVX2: x packed, prompts through the int8
# kernel").
INTERLEAVED_MAX_ROWS: dict[Int8Path, int | None] = {"avx512-vnni": None, "avx2": None}
# Where torch's matmuls run on AMX tiles (oneDNN's bf16 brgemm: several times VNNI's int8
# dot products a cycle) a prompt's rows keep that path, and VNNI takes up to a decode batch
# of 64 (CPU_GRAPH_MAX_BATCH), where it beat dequantize-then-matmul 3-3.5x on a Zen 4; not
# measured against AMX on a Sapphire Rapids since x was packed.
AMX_INTERLEAVED_MAX_ROWS = 64
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}


def load_quant_linear(extra_flags: tuple[str, ...] = ()) -> QuantLinearKernel | None:
    """The kernel, or None where no C compiler builds it (layers then use torch)."""
    try:
        library = load_library("quant_linear", extra_flags)
    except KernelBuildError as error:
        log.warning("group-quantized matmul kernel unavailable, using torch: %s", error)
        return None
    try:
        int8: ctypes.CDLL | None = load_library("quant_linear_q8", extra_flags)
    except KernelBuildError as error:
        log.warning("int8-activation group-quantized matmul unavailable: %s", error)
        int8 = None
    return QuantLinearKernel(library, PATHS[library.quant_linear_available()], int8)


def interleaved_max_rows(int8_path: Int8Path | None, amx: bool) -> int | None:
    """The most rows of x the int8 path takes over a weight bound interleaved (None: any
    number; 0 where the build has no interleaved kernel)."""
    if int8_path is None or int8_path not in INTERLEAVED_PATHS:
        return 0
    if amx and int8_path == "avx512-vnni":
        return AMX_INTERLEAVED_MAX_ROWS
    return INTERLEAVED_MAX_ROWS[int8_path]


class QuantLinearKernel:
    def __init__(
        self,
        library: ctypes.CDLL,
        path: QuantPath,
        int8: ctypes.CDLL | None = None,
        *,
        amx: bool | None = None,
    ) -> None:
        """``amx``: whether torch's matmuls run on AMX tiles here (None: ask torch), which
        keeps a prompt's rows off the VNNI int8 path (`AMX_INTERLEAVED_MAX_ROWS`)."""
        self._lib = library
        self._int8 = int8
        self.path = path
        self.int8_path: Int8Path | None = (
            None if int8 is None else INT8_PATHS[int8.quant_linear_q8_available()]
        )
        # An attribute, not a property: a decode step's layers read it over a hundred times.
        self.interleaved_max_rows = interleaved_max_rows(
            self.int8_path, torch_has_amx() if amx is None else amx
        )

    @property
    def int8_max_rows(self) -> int:
        """The most rows of x `matmul_int8` is worth calling for (0 where not built)."""
        return 0 if self.int8_path is None else INT8_MAX_ROWS[self.int8_path]

    def bind(self, weight: GroupQuantized, *, interleave: bool = False) -> BoundWeight | None:
        """The weight checked once for `matmul_bound` (None where the kernel does not take
        it): a decode step's layers call the kernel over a hundred times, each checking and
        spelling out the same weight, which cost as much as the multiply on a small layer.
        ``interleave``: also lay the weight out 16 rows interleaved for the int8 path where
        that layout's kernel runs (`can_interleave`), a copy of its codes and scales."""
        if not _contiguous(weight):
            return None
        laid = interleave_rows(weight) if interleave and self.can_interleave(weight) else None
        return BoundWeight(weight, laid)

    def int8_rows_for(self, weight: GroupQuantized) -> int | None:
        """The most rows of x a layer holding ``weight`` multiplies with int8 activations
        (None: any number): `interleaved_max_rows` where it is bound interleaved, else
        `int8_max_rows`."""
        return self.interleaved_max_rows if self.can_interleave(weight) else self.int8_max_rows

    def can_interleave(self, weight: GroupQuantized) -> bool:
        """Whether `matmul_bound`'s int8 path takes ``weight`` 16 rows interleaved
        (quant_linear_q8_il.h): AVX512-VNNI or AVX2, rows a multiple of 16 (and codes that
        `interleave_rows` can read four bytes at a time)."""
        return (
            self.int8_path in INTERLEAVED_PATHS
            and weight.rows % INTERLEAVED_ROWS == 0
            and weight.codes.data_ptr() % 4 == 0
        )

    def matmul(self, x: torch.Tensor, weight: GroupQuantized) -> torch.Tensor | None:
        """``x @ dequantize(weight).T`` (T, rows) in x's dtype for float32 or bfloat16 x
        (T, cols) on the CPU, or None where the kernel does not take these tensors."""
        bound = self.bind(weight)
        return None if bound is None else self.matmul_bound(x, bound)

    def matmul_int8(
        self, x: torch.Tensor, weight: GroupQuantized, *, interleave: bool = False
    ) -> torch.Tensor | None:
        """As `matmul`, but with each row of x quantized to int8 per block of 32 columns
        (scale amax / 127, round half to even) and integer dot products with the codes;
        the offsets multiply the float sums of x. None where not taken (or not built).
        ``interleave``: through the 16-row interleaved layout where it runs, as a layer
        with int8 activations does (the same sums in another order)."""
        bound = self.bind(weight, interleave=interleave)
        return None if bound is None else self.matmul_bound(x, bound, int8=True)

    def matmul_bound(
        self, x: torch.Tensor, weight: BoundWeight, *, int8: bool = False
    ) -> torch.Tensor | None:
        """`matmul` (or `matmul_int8`) of a weight `bind` checked: only x is checked here."""
        function, arguments = self._lib.quant_linear, weight.arguments
        if int8:
            if self._int8 is None:
                return None
            function = self._int8.quant_linear_q8
            if weight.interleaved_arguments is not None:
                function, arguments = self._int8.quant_linear_q8_il, weight.interleaved_arguments
        dtype = _DTYPES.get(x.dtype)
        if dtype is None or x.dim() != 2 or x.shape[0] == 0 or not x.is_cpu:
            return None
        if x.shape[1] != weight.cols or x.stride(1) != 1:
            return None
        out = torch.empty((x.shape[0], weight.rows), dtype=x.dtype)
        failed = function(
            x.data_ptr(),
            x.stride(0),
            dtype,
            x.shape[0],
            *arguments,
            out.data_ptr(),
            torch.get_num_threads(),
        )
        return None if failed else out

    def dequantize(self, weight: GroupQuantized, dtype: torch.dtype) -> torch.Tensor | None:
        """The float weight (rows, cols) in float32 or bfloat16, or None if not taken."""
        bound = self.bind(weight) if dtype in _DTYPES else None
        if bound is None:
            return None
        out = torch.empty((weight.rows, weight.cols), dtype=dtype)
        failed = self._lib.quant_dequantize(
            *bound.arguments,
            out.data_ptr(),
            _DTYPES[dtype],
            torch.get_num_threads(),
        )
        return None if failed else out


class BoundWeight:
    """A contiguous CPU weight's pointers and format as the kernels take them; it holds the
    weight (and its interleaved copy, if made), so the pointers stay valid while it lives.
    Made by `QuantLinearKernel.bind`."""

    def __init__(self, weight: GroupQuantized, interleaved: GroupQuantized | None = None) -> None:
        self.weight, self.interleaved = weight, interleaved
        self.rows, self.cols = weight.rows, weight.cols
        self.arguments = _arguments(weight)
        self.interleaved_arguments = None if interleaved is None else _arguments(interleaved)


def _arguments(weight: GroupQuantized) -> tuple[int, ...]:
    return (
        weight.codes.data_ptr(),
        weight.scale.data_ptr(),
        weight.offset.data_ptr(),
        weight.rows,
        weight.cols,
        weight.bits,
        weight.group_size,
    )


def interleave_rows(weight: GroupQuantized) -> GroupQuantized:
    """A weight (rows a multiple of 16) laid out as quant_linear_q8_il.h reads it: for each
    16 rows, each block's bytes (16 for 4-bit codes, 32 for 8-bit) as 4-byte steps, a step's
    16 rows side by side;
    the scales and offsets each group's 16 rows side by side. The same codes and values in
    another order (a `GroupQuantized` only as the kernels' carrier: its arrays' shapes are
    not the file layout's)."""
    from inference.model.quant.group_math import GroupQuantized

    tiles, rows = weight.rows // INTERLEAVED_ROWS, INTERLEAVED_ROWS

    def lanes(part: torch.Tensor, width: int) -> torch.Tensor:  # (N, width) -> tiles, width, 16
        return part.reshape(tiles, rows, width).transpose(1, 2).contiguous()

    steps = weight.codes.view(torch.int32)  # 4 bytes of a row a step, 4 steps a block
    codes = lanes(steps, steps.shape[1]).view(torch.uint8).reshape(weight.rows, -1)
    return GroupQuantized(
        codes=codes,
        scale=lanes(weight.scale, weight.groups).reshape(weight.rows, -1),
        offset=lanes(weight.offset, weight.groups).reshape(weight.rows, -1),
        bits=weight.bits,
        group_size=weight.group_size,
        cols=weight.cols,
    )


def _contiguous(weight: GroupQuantized) -> bool:
    return all(
        part.is_contiguous() and part.device.type == "cpu"
        for part in (weight.codes, weight.scale, weight.offset)
    )
