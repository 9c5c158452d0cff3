"""The CPU's FP8 matmul (fp8_linear.c) against float64 over the same dequantized weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inference.kernels.cpu.build import load_library
from inference.kernels.cpu.fp8_linear import (
    FLOAT32_MAX_ROWS,
    GROUPED_MAX_ROWS,
    PER_ROW_MAX_ROWS,
    Fp8LinearKernel,
    load_fp8_linear,
)
from inference.kernels.cpu.layers import load_layer_kernels
from inference.model.quant import Fp8Linear
from inference.model.quant.fp8_math import FP8_DTYPE, dequantize_weight_fp8, quantize_weight_fp8


def cpu_flags() -> set[str]:
    flags = next(line for line in Path("/proc/cpuinfo").read_text().splitlines() if "flags" in line)
    return set(flags.split(":", 1)[1].split())


AVX512 = {"avx512f", "avx512bw", "avx512vl"}
AVX2 = {"avx2", "fma", "f16c"}


def builds_here() -> dict[str, tuple[str, ...]]:
    """The native build and each other path this processor can run, forced by flags: one
    with AVX-512 BF16 checks all three, an AVX2 processor its one."""
    flags = cpu_flags()
    builds: dict[str, tuple[str, ...]] = {"native": ()}
    if flags >= AVX512 and "avx512_bf16" in flags:
        builds["emulated"] = ("-mno-avx512bf16",)
    if flags >= AVX512:
        builds["avx2"] = ("-mno-avx512f",)
    return builds


BUILDS = builds_here()


def path_of(build: str) -> str:
    """The path `build` compiles to on this processor."""
    flags = cpu_flags()
    if build == "avx2" or not flags >= AVX512:
        return "avx2"
    return "bf16" if build == "native" and "avx512_bf16" in flags else "emulated"


@pytest.fixture(scope="module", params=list(BUILDS))
def build(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_this_processor_gets_its_path() -> None:
    """With AVX-512F, BW and VL (Sapphire Rapids, the AMD EPYC with AVX-512 BF16, the Ice
    Lake Xeon without it) the native build runs the AVX-512 kernel; with AVX2, FMA and F16C
    only (an EPYC before Zen 4) the AVX2 one; without (none here) FP8 layers dequantize."""
    flags = cpu_flags()
    loaded = load_fp8_linear()
    kernels = load_layer_kernels()
    assert kernels is not None
    if flags >= AVX512 or flags >= AVX2:
        assert loaded is not None and loaded.path == path_of("native")
        assert kernels.fp8 is not None
    else:
        assert loaded is None and kernels.fp8 is None


@pytest.fixture(scope="module")
def kernel(build: str) -> Fp8LinearKernel:
    """The fused kernel, on a processor that can run it. Without AVX2, FMA and F16C (no
    x86-64 server since 2013) the instructions it is built from do not exist, so the tests
    that execute it cannot run there: what does run there (the decline, the fallback) is
    asserted by test_this_processor_gets_its_path and test_portable_build_falls_back."""
    if not cpu_flags() >= AVX2:
        pytest.skip("no AVX2/FMA/F16C on this processor: the fused FP8 kernel cannot execute")
    loaded = load_fp8_linear(BUILDS[build])
    assert loaded is not None and loaded.path == path_of(build)
    return loaded


def expected(
    x: torch.Tensor, q: torch.Tensor, scale: torch.Tensor, group: int | None
) -> torch.Tensor:
    """What the kernel computes, in float64: per-row scales multiply the exact sums; grouped
    ones are applied to the weight first, rounded once to bf16 (as the fallback does)."""
    if group is None:
        return (x.double() @ q.double().T) * scale.double()
    return x.double() @ dequantize_weight_fp8(q, scale, torch.bfloat16, group).double().T


@pytest.mark.parametrize(
    ("rows", "out", "cols", "group"),
    [
        # Up to 4 rows ("rows" in fp8_linear.c):
        (1, 7, 40, None),  # a ragged last chunk of 32 columns, a ragged last tile of 4 rows
        (3, 33, 576, None),
        (4, 64, 96, None),  # one full tile of 4 activation rows
        (2, 9, 96, 16),
        (4, 17, 70, 32),  # a ragged last group
        # More ("panels"): blocks of 16 rows, 1 to 4 of them at a time, chunks of 64.
        (5, 7, 40, None),  # one block, mostly padding; a ragged last weight tile
        (17, 33, 577, None),  # an odd number of columns: the last pair half empty
        (48, 25, 96, None),  # three blocks, 8 weight rows at a time
        (64, 50, 1536, None),  # four blocks, 6 weight rows at a time
        (PER_ROW_MAX_ROWS - 1, 49, 70, None),  # two chunks of 64, the second ragged
        (9, 100, 576, 16),
        (33, 30, 64, 32),
        (GROUPED_MAX_ROWS, 20, 64, 16),
        (300, 26, 96, None),  # past the "bf16" build's limits: the others only
        (300, 26, 96, 32),
    ],
)
def test_matches_float64(
    kernel: Fp8LinearKernel, rows: int, out: int, cols: int, group: int | None
) -> None:
    g = torch.Generator().manual_seed(rows * 1000 + cols)
    weight = torch.randn(out, cols, generator=g)
    weight[0, :5] = 1e-7  # e4m3 subnormals after scaling
    q, scale = quantize_weight_fp8(weight, group)
    wide = torch.randn(rows, cols + 8, generator=g).bfloat16()
    x = wide[:, 3 : 3 + cols]  # rows strided, as a view of a fused projection
    got = kernel(x, q, scale.contiguous(), group)
    limit = kernel.max_rows(group)
    if limit is not None and rows > limit:
        assert got is None
        return
    assert got is not None and got.dtype == torch.bfloat16 and got.shape == (rows, out)
    want = expected(x, q, scale, group)
    # Rounding the float32 sums to bf16: half an ulp, 2^-9 of each value.
    torch.testing.assert_close(got.double(), want, rtol=2**-8, atol=1e-6 * want.abs().max().item())


@pytest.mark.parametrize(
    ("rows", "out", "cols", "group"),
    [
        (1, 7, 40, None),
        (4, 33, 577, 32),  # the 4-row loop, a ragged last group
        (3, 9, 96, 16),
        (5, 7, 40, None),  # panels of 8 rows: one, mostly padding
        (17, 30, 64, 16),  # two and one
        (FLOAT32_MAX_ROWS, 25, 1536, None),
        (FLOAT32_MAX_ROWS + 1, 8, 64, None),  # past the limit: declined
    ],
)
def test_float32_activations_match_float64(
    kernel: Fp8LinearKernel, rows: int, out: int, cols: int, group: int | None
) -> None:
    """float32 x (a float32 model's) through the AVX2 code on every build: float32 out,
    grouped weights not rounded to bf16 (the fallback's float32 dequantizing)."""
    g = torch.Generator().manual_seed(rows * 1000 + cols + 1)
    weight = torch.randn(out, cols, generator=g)
    weight[0, :5] = 1e-7
    q, scale = quantize_weight_fp8(weight, group)
    x = torch.randn(rows, cols + 8, generator=g)[:, 5 : 5 + cols]
    got = kernel(x, q, scale.contiguous(), group)
    if rows > FLOAT32_MAX_ROWS:
        assert got is None
        return
    assert got is not None and got.dtype == torch.float32 and got.shape == (rows, out)
    if group is None:
        want = (x.double() @ q.double().T) * scale.double()
    else:
        want = x.double() @ dequantize_weight_fp8(q, scale, torch.float32, group).double().T
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * want.abs().max().item())


@pytest.mark.parametrize("rows", [1, 20])  # both ways through the kernel
def test_every_e4m3_value_is_widened_exactly(kernel: Fp8LinearKernel, rows: int) -> None:
    """Each byte (NaN aside) at column 5 of its own row, x picking column 5: out is the value."""
    codes = torch.arange(256, dtype=torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]
    q = torch.zeros(codes.numel(), 40, dtype=torch.uint8)
    q[:, 5] = codes
    q = q.view(FP8_DTYPE)
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.zeros(rows, 40, dtype=dtype)
        x[:, 5] = 1
        for group in (None, 16):
            scale = torch.ones(codes.numel()) if group is None else torch.ones(codes.numel(), 3)
            got = kernel(x, q, scale, group)
            assert got is not None
            assert torch.equal(got, q[:, 5].to(dtype).expand(rows, -1))


@pytest.mark.parametrize("rows", [1, 20])
def test_grouped_weights_round_as_the_fallback_does(kernel: Fp8LinearKernel, rows: int) -> None:
    """Grouped scales are applied in float32 and the product rounded once to bfloat16, to
    nearest even: with x picking column 5, out is the fallback's dequantized value bit for
    bit. The scales put some products exactly halfway (rounding down to even, and up to
    even) and others above and below half."""
    codes = torch.arange(256, dtype=torch.uint8)
    codes = codes[(codes & 0x7F) != 0x7F]
    q = torch.zeros(codes.numel(), 40, dtype=torch.uint8)
    q[:, 5] = codes
    q = q.view(FP8_DTYPE)
    scales = torch.tensor([1 + 2**-8, 1 + 2**-7 + 2**-8, 1.2345, 3.7e-3, 2.5e4])
    scale = scales.repeat(-(-codes.numel() // 5))[: codes.numel(), None].expand(-1, 3)
    x = torch.zeros(rows, 40, dtype=torch.bfloat16)
    x[:, 5] = 1
    got = kernel(x, q, scale.contiguous(), 16)
    want = dequantize_weight_fp8(q, scale, torch.bfloat16, 16)[:, 5]
    assert got is not None and torch.equal(got, want.expand(rows, -1))


@pytest.mark.parametrize("rows", [1, 20])
def test_reads_no_scale_past_the_last_group(kernel: Fp8LinearKernel, rows: int) -> None:
    """40 columns pad to 64: the padding has no group, so no scale may be read for it (the
    last row's would lie past the tensor; here a NaN waits there)."""
    q, scale = quantize_weight_fp8(torch.randn(5, 40), 16)
    assert scale.shape == (5, 3)
    memory = torch.full((scale.numel() + 16,), float("nan"))
    memory[: scale.numel()] = scale.flatten()
    x = torch.randn(rows, 40).bfloat16()
    got = kernel(x, q, memory[: scale.numel()].view(5, 3), 16)
    assert got is not None and torch.equal(got, kernel(x, q, scale.contiguous(), 16))
    assert torch.isfinite(got).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 20])
def test_a_zero_group_scale_zeroes_its_group(
    kernel: Fp8LinearKernel, rows: int, dtype: torch.dtype
) -> None:
    """A checkpoint may store a scale of 0 (an all-zero block) over nonzero codes: the
    group then adds nothing, as in the fallback's dequantized weight."""
    q, scale = quantize_weight_fp8(torch.randn(6, 48), 16)
    scale[:, 1] = 0
    x = torch.randn(rows, 48).to(dtype)
    got = kernel(x, q, scale.contiguous(), 16)
    want = x.double() @ dequantize_weight_fp8(q, scale, dtype, 16).double().T
    assert got is not None
    torch.testing.assert_close(got.double(), want, rtol=2**-8, atol=1e-5)


def test_declines_what_it_does_not_take(kernel: Fp8LinearKernel) -> None:
    q, scale = quantize_weight_fp8(torch.randn(8, 64))
    grouped_q, grouped_scale = quantize_weight_fp8(torch.randn(8, 64), 8)
    x = torch.randn(2, 64).bfloat16()
    assert kernel(x, q, scale, None) is not None
    assert kernel(x.half(), q, scale, None) is None  # float16 activations
    many = torch.randn(PER_ROW_MAX_ROWS + 1, 64).bfloat16()
    assert (kernel(many, q, scale, None) is None) == (kernel.path == "bf16")
    assert kernel(x[:0], q, scale, None) is None
    assert kernel(x, grouped_q, grouped_scale, 8) is None  # groups must be a multiple of 16
    assert kernel(x, q[:, :32], scale, None) is None  # columns differ from x's
    assert kernel(x, q.t().contiguous().t(), scale, None) is None  # not contiguous
    assert kernel(x, q, scale[:4], None) is None


def test_portable_build_falls_back() -> None:
    """Without AVX2 the library builds but says it cannot run: layers dequantize."""
    assert load_library("fp8_linear", ("-mno-avx2",)).fp8_linear_available() == 0
    assert load_fp8_linear(("-mno-avx2",)) is None
    portable = load_layer_kernels(("-mno-avx2",))
    assert portable is not None and portable.fp8 is None
    q, scale = quantize_weight_fp8(torch.randn(8, 64))
    assert portable.fp8_linear(torch.randn(2, 64).bfloat16(), q, scale, None) is None


def test_avx512_builds_compile() -> None:
    """The AVX-512 paths compile wherever the tests run (a processor without AVX-512 cannot
    run them, but the library says which path it was built with)."""
    avx512 = ("-mavx512f", "-mavx512bw", "-mavx512vl")
    assert load_library("fp8_linear", (*avx512, "-mavx512bf16")).fp8_linear_available() == 1
    assert load_library("fp8_linear", (*avx512, "-mno-avx512bf16")).fp8_linear_available() == 2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("rows", [1, 3, PER_ROW_MAX_ROWS, PER_ROW_MAX_ROWS + 1])
def test_layer_gives_the_fallbacks_result(
    build: str, kernel: Fp8LinearKernel, rows: int, dtype: torch.dtype
) -> None:
    """An Fp8Linear with the CPU kernels set: the fused kernel where it takes the rows (the
    "bf16" build up to a limit), dequantizing for more; both within rounding of the plain
    layer (bf16's, or float32's for a float32 model)."""
    from inference.model.layers.linear import FusedLinear

    cpu = torch.device("cpu")
    linear = FusedLinear(96, [40, 24], bias=True, dtype=dtype, device=cpu)
    torch.nn.init.normal_(linear.weight)
    torch.nn.init.normal_(linear.bias)
    layer = Fp8Linear.from_linear(linear)
    x = torch.randn(rows, 96).to(dtype)
    plain = layer(x)
    kernels = load_layer_kernels(BUILDS[build])
    assert kernels is not None and kernels.fp8 is not None
    assert kernels.fp8.path == kernel.path
    layer.kernels = kernels
    fast = layer(x)
    if dtype == torch.float32:
        torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-4)
    else:
        torch.testing.assert_close(fast.float(), plain.float(), rtol=2e-2, atol=5e-2)
    fused = kernels.fp8_linear(x, layer.weight, layer.weight_scale, None)
    # float32: every row count here is within FLOAT32_MAX_ROWS
    takes = dtype == torch.float32 or kernel.path != "bf16" or rows <= PER_ROW_MAX_ROWS
    assert (fused is not None) == takes
    if fused is not None:
        assert layer.bias is not None and torch.equal(fast, fused + layer.bias)
