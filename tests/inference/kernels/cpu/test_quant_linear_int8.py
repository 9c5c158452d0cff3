"""The int8-activation group-quantized matmul (quant_linear_q8.c) in every build this
machine makes: against the same arithmetic done in torch (x quantized per block of 32 the
same way, exact integer dots, float64 sums), tightly; and against the float32
dequantize-then-matmul it stands in for, with its error bounded and printed."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from inference.kernels.cpu.features import torch_has_amx
from inference.kernels.cpu.layers import load_layer_kernels
from inference.kernels.cpu.quant_linear import (
    AMX_INTERLEAVED_MAX_ROWS,
    INTERLEAVED_MAX_ROWS,
    INTERLEAVED_PATHS,
    INTERLEAVED_ROWS,
    MAX_KERNEL_ROWS,
    BoundWeight,
    QuantLinearKernel,
    interleave_rows,
    interleaved_max_rows,
    load_quant_linear,
)
from inference.model.quant.group_linear import GroupQuantLinear
from inference.model.quant.group_math import (
    BLOCK,
    GroupQuantized,
    dequantize,
    pack_codes,
    padded_cols,
    quantize_groups,
    unpack_codes,
)
from tests.inference.kernels.cpu.quant_builds import BUILDS, expected_paths


@pytest.fixture(scope="module", params=list(BUILDS))
def kernel(request: pytest.FixtureRequest) -> QuantLinearKernel:
    built = load_quant_linear(BUILDS[request.param])
    assert built is not None
    assert (built.path, built.int8_path) == expected_paths(request.param)
    return built


def int8_reference(x: torch.Tensor, weight: GroupQuantized) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, the sum of the terms' magnitudes) in float64, for x (M, cols): the kernel's
    arithmetic written out. Per block of 32 columns d = amax * (1 / 127) and q =
    round_half_even(x * (1 / d)) in float32; codes centred on z = 2**(bits - 1); the
    offset term is (offset + z * scale) (float32, as the kernel) times x's float sums."""
    m, cols = x.shape
    kp, rows, gs = padded_cols(cols), weight.rows, weight.group_size
    blocks, groups = kp // BLOCK, weight.groups
    xp = torch.zeros(m, groups * gs)
    xp[:, :cols] = x.float()
    xb = xp[:, :kp].reshape(m, blocks, BLOCK)
    d = xb.abs().amax(dim=2) * (torch.tensor(1.0) / 127)
    inverse = torch.where(d > 0, 1.0 / d, torch.zeros(()))
    q = torch.round(xb * inverse[..., None]).clamp(-127, 127)
    z = 1 << (weight.bits - 1)
    codes = unpack_codes(weight.codes, weight.bits, kp).double() - z
    dots = torch.einsum("mbk,nbk->mnb", q.double(), codes.reshape(rows, blocks, BLOCK))
    scale = weight.scale.float().repeat_interleave(gs // BLOCK, dim=1)[:, :blocks]
    terms = dots * (scale[None] * d[:, None, :]).double()  # (M, N, blocks)
    offset = (weight.offset.float() + z * weight.scale.float()).double()  # (N, G)
    sums = xp.double().reshape(m, groups, gs).sum(dim=2)  # (M, G)
    y = terms.sum(dim=2) + sums @ offset.T
    magnitude = terms.abs().sum(dim=2) + sums.abs() @ offset.abs().T
    return y, magnitude


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize(("rows", "cols"), [(7, 33), (65, 200), (130, 577)])
def test_int8_matches_its_arithmetic(
    kernel: QuantLinearKernel, bits: int, group_size: int, rows: int, cols: int
) -> None:
    torch.manual_seed(rows * cols + bits + group_size)
    weight = quantize_groups(torch.randn(rows, cols), bits, group_size)
    for m in (*range(1, 16), 17):
        x = torch.randn(m, cols) * torch.rand(m, 1) * 4  # rows of different magnitudes
        x[0, : min(cols, 40)] = 0.0  # an all-zero block: d = 0
        expected, magnitude = int8_reference(x, weight)
        got = kernel.matmul_int8(x, weight)
        assert got is not None and got.dtype == torch.float32
        assert ((got.double() - expected).abs() <= 1e-5 * (1 + magnitude)).all()
        xb = x.bfloat16()
        expected_b, magnitude_b = int8_reference(xb, weight)
        got_b = kernel.matmul_int8(xb, weight)
        assert got_b is not None and got_b.dtype == torch.bfloat16
        bound = 2**-8 * expected_b.abs() + 1e-5 * (1 + magnitude_b)
        assert ((got_b.double() - expected_b).abs() <= bound).all()


def assert_matches_reference(
    got: torch.Tensor | None, x: torch.Tensor, weight: GroupQuantized
) -> None:
    expected, magnitude = int8_reference(x, weight)
    assert got is not None and got.dtype == x.dtype
    bound = 1e-5 * (1 + magnitude)
    if x.dtype == torch.bfloat16:  # the output's own rounding
        bound = bound + 2**-8 * expected.abs()
    assert ((got.double() - expected).abs() <= bound).all()


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize(("rows", "cols"), [(37, 96), (50, 608), (19, 1000)])
def test_int8_at_batch_rows(
    kernel: QuantLinearKernel, bits: int, group_size: int, rows: int, cols: int
) -> None:
    """Rows of x by the tile of 4 and past it (16-128 as a batch of decode steps, 300 as a
    prefill chunk), weight rows not a whole number of tiles or chunks of 16, K an odd
    number of blocks (96, 608) or not whole blocks (1000)."""
    torch.manual_seed(rows + cols + bits + group_size)
    weight = quantize_groups(torch.randn(rows, cols), bits, group_size)
    for m in (16, 17, 18, 19, 31, 32, 33, 63, 64, 65, 127, 128, 300):
        x = torch.randn(m, cols) * torch.rand(m, 1) * 4
        x[m // 2, : min(cols, 64)] = 0.0  # zero blocks in a row inside a tile
        assert_matches_reference(kernel.matmul_int8(x, weight), x, weight)
        xb = x.bfloat16()
        assert_matches_reference(kernel.matmul_int8(xb, weight), xb, weight)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("cols", [96, 577])
def test_int8_quantizes_every_column_in_place(
    kernel: QuantLinearKernel, bits: int, cols: int
) -> None:
    """Weight row n is 1 at column n and 0 elsewhere (code z + 1 among codes z, scale 1,
    offset -z), so y[m, n] = d * q[m, n] exactly: every column's int8 value, read back
    and compared as an integer with round_half_even(x * (1 / d)). A column misplaced by a
    path's layout of q (pairs of blocks on AVX2, quads with VNNI) or rounded another way
    shows, where the float comparisons above could hide one step of q."""
    torch.manual_seed(cols + bits)
    z = 1 << (bits - 1)
    codes = torch.full((cols, cols), z, dtype=torch.int32) + torch.eye(cols, dtype=torch.int32)
    groups = (cols + 31) // 32
    weight = GroupQuantized(
        pack_codes(codes, bits),
        torch.ones(cols, groups, dtype=torch.float16),
        torch.full((cols, groups), -float(z), dtype=torch.float16),
        bits, 32, cols,
    )  # fmt: skip
    for m in (1, 2, 3, 5, 9):
        for x in (torch.randn(m, cols) * 3, (torch.randn(m, cols) * 3).bfloat16()):
            xp = torch.zeros(m, padded_cols(cols))
            xp[:, :cols] = x.float()
            xb = xp.reshape(m, -1, BLOCK)
            d = xb.abs().amax(dim=2) * (torch.tensor(1.0) / 127)
            q = torch.round(xb * torch.where(d > 0, 1.0 / d, 0.0)[..., None]).clamp(-127, 127)
            got = kernel.matmul_int8(x, weight)
            assert got is not None
            d_col = d.repeat_interleave(BLOCK, dim=1)[:, :cols]
            read = torch.round(got.float() / d_col)
            assert torch.equal(read, q.reshape(m, -1)[:, :cols]), (m, x.dtype)


@pytest.mark.parametrize("bits", [4, 8])
def test_int8_error_against_float(kernel: QuantLinearKernel, bits: int) -> None:
    """Gaussian x and weights: x's int8 rounding costs about 0.6% of the output's norm
    (recorded in docs/engine.md)."""
    torch.manual_seed(bits)
    weight = quantize_groups(torch.randn(512, 576), bits, 32)
    x = torch.randn(8, 576)
    exact = x @ dequantize(weight).T
    got = kernel.matmul_int8(x, weight)
    assert got is not None
    relative = ((got - exact).norm() / exact.norm()).item()
    print(f"int8 activations, {bits}-bit codes: relative error {relative:.4f}")
    assert relative < 0.01


def test_int8_refusals(kernel: QuantLinearKernel) -> None:
    weight = quantize_groups(torch.randn(24, 96), 4, 32)
    wide = torch.randn(3, 200)
    x = wide[:, 10:106]  # rows 200 apart
    got = kernel.matmul_int8(x, weight)
    expected, magnitude = int8_reference(x, weight)
    assert got is not None and ((got.double() - expected).abs() <= 1e-5 * (1 + magnitude)).all()
    assert kernel.matmul_int8(torch.randn(2, 95), weight) is None  # wrong width
    assert kernel.matmul_int8(torch.randn(2, 96).half(), weight) is None  # float16: not taken


def test_layer_uses_int8_only_when_asked() -> None:
    kernels = load_layer_kernels()
    assert kernels is not None and kernels.quant is not None
    layer = GroupQuantLinear(96, [40, 24], bits=4, group_size=32, bias=False,
                             dtype=torch.float32, device="cpu")  # fmt: skip
    layer.fill_rows(slice(None), quantize_groups(torch.randn(64, 96), 4, 32), "w")
    layer.kernels = kernels
    x = torch.randn(3, 96)
    exact = kernels.quant.matmul(x, layer.packed)
    assert exact is not None and torch.equal(layer(x), exact)  # the default: exact
    layer.int8_activations = True
    int8 = kernels.quant.matmul_int8(x, layer.packed, interleave=True)
    assert int8 is not None and torch.equal(layer(x), int8)
    assert not torch.equal(int8, exact)  # a different arithmetic, so the switch is seen
    bound = layer._bound_weight  # 64 rows of 4-bit codes: interleaved where VNNI or AVX2 runs
    assert bound is not None
    assert (bound.interleaved is not None) == (kernels.quant.int8_path in INTERLEAVED_PATHS)
    layer.int8_activations = False  # switched back: exact again, off the file's layout
    assert torch.equal(layer(x), exact) and layer._bound_weight.interleaved is None


def test_interleaved_row_limits() -> None:
    """Every interleaved build takes any number of rows, but VNNI where torch's matmuls run on
    AMX tiles: there a prompt's rows keep the bf16 path. A build without the kernel: 0."""
    for amx in (False, True):
        assert interleaved_max_rows("avx2", amx) is None
        assert interleaved_max_rows("portable", amx) == 0
        assert interleaved_max_rows(None, amx) == 0
    assert INTERLEAVED_MAX_ROWS["avx512-vnni"] is None
    assert interleaved_max_rows("avx512-vnni", False) is None
    assert interleaved_max_rows("avx512-vnni", True) == AMX_INTERLEAVED_MAX_ROWS == 64
    built = load_quant_linear()
    assert built is not None and built._int8 is not None
    for amx in (False, True):  # the kernel asks torch unless told
        told = QuantLinearKernel(built._lib, built.path, built._int8, amx=amx)
        assert told.interleaved_max_rows == interleaved_max_rows(built.int8_path, amx)
    assert built.interleaved_max_rows == interleaved_max_rows(built.int8_path, torch_has_amx())


def test_layer_takes_int8_up_to_its_builds_limit() -> None:
    """With int8 activations the layer multiplies a batch of decode steps (up to the build's
    `int8_max_rows`: 32 with VNNI or AVX2) through the int8 kernel, past the exact kernel's 16
    rows, and over a weight bound interleaved up to `interleaved_max_rows` (any number, a
    prompt's rows too, except VNNI beside AMX: 64); one row more, and without the option, it
    dequantizes as before."""
    kernels = load_layer_kernels()
    assert kernels is not None and kernels.quant is not None
    quant = kernels.quant
    layer = GroupQuantLinear(96, [40, 24], bits=4, group_size=32, bias=False,
                             dtype=torch.bfloat16, device="cpu")  # fmt: skip
    layer.fill_rows(slice(None), quantize_groups(torch.randn(64, 96), 4, 32), "w")
    layer.kernels = kernels
    limit = quant.int8_rows_for(layer.packed)
    if quant.int8_path in INTERLEAVED_PATHS:  # 64 rows of 4-bit codes: bound interleaved
        assert quant.int8_max_rows >= 32
        assert limit == quant.interleaved_max_rows
        beside_amx = quant.int8_path == "avx512-vnni" and torch_has_amx()
        assert limit == (AMX_INTERLEAVED_MAX_ROWS if beside_amx else None)
    else:
        assert limit == quant.int8_max_rows and quant.interleaved_max_rows == 0
    whole = quant.dequantize(layer.packed, torch.bfloat16)
    assert whole is not None
    x = torch.randn(300 if limit is None else limit + 1, 96).bfloat16()
    at_limit = x if limit is None else x[:limit]
    assert torch.equal(layer(at_limit), F.linear(at_limit, whole))  # the default: dequantized
    layer.int8_activations = True
    int8 = quant.matmul_int8(at_limit, layer.packed, interleave=True)
    assert int8 is not None and torch.equal(layer(at_limit), int8)
    assert not torch.equal(int8, F.linear(at_limit, whole))
    if limit is None:  # every row through the kernel, and in place for the graphs
        assert layer.rows_in_place is None
    else:
        assert torch.equal(layer(x), F.linear(x, whole))  # one row past the limit
    few = x[: MAX_KERNEL_ROWS - 1]
    expected = (
        quant.matmul_int8(few, layer.packed, interleave=True)
        if limit is None or limit >= len(few)
        else quant.matmul(few, layer.packed)
    )
    assert expected is not None and torch.equal(layer(few), expected)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize(("rows", "cols"), [(48, 33), (64, 608), (160, 1000)])
def test_int8_interleaved_matches_its_arithmetic(
    kernel: QuantLinearKernel, bits: int, group_size: int, rows: int, cols: int
) -> None:
    """The int8 path over the 16-row interleaved layout (quant_linear_q8_il.h), which a
    layer with int8 activations takes where the build runs it (AVX512-VNNI or AVX2, rows a
    multiple of 16): the same arithmetic, tiles of 1-8 rows of x (VNNI; AVX2 1-4), K a
    partial block (33, 1000) or an odd number of them (608 is 19), and past 64 rows, as a
    prompt's rows come (work items of 64 rows, the last one ragged)."""
    torch.manual_seed(rows + cols + group_size + bits)
    weight = quantize_groups(torch.randn(rows, cols), bits, group_size)
    bound = kernel.bind(weight, interleave=True)
    assert bound is not None
    if kernel.int8_path not in INTERLEAVED_PATHS:  # plain C keeps the file's layout
        assert not kernel.can_interleave(weight) and bound.interleaved_arguments is None
        return
    assert bound.interleaved_arguments is not None
    for m in (*range(1, 10), 16, 17, 31, 32, 63, 64, 65, 130, 259):
        x = torch.randn(m, cols) * torch.rand(m, 1) * 4
        x[m // 2, : min(cols, 40)] = 0.0  # an all-zero block: d = 0
        assert_matches_reference(kernel.matmul_bound(x, bound, int8=True), x, weight)
        xb = x.bfloat16()
        assert_matches_reference(kernel.matmul_bound(xb, bound, int8=True), xb, weight)


def test_interleave_reorders_8_bit_codes() -> None:
    """8-bit codes: lane r of step s of a block is row 16t + r's columns 4s..4s+3."""
    torch.manual_seed(4)
    weight = quantize_groups(torch.randn(16, 64), 8, 32)
    laid = interleave_rows(weight)
    codes = weight.codes.reshape(INTERLEAVED_ROWS, 2, 8, 4)  # r, b, s, byte
    assert torch.equal(laid.codes.reshape(2, 8, INTERLEAVED_ROWS, 4).permute(2, 0, 1, 3), codes)


def test_interleave_reorders_codes_and_scales() -> None:
    """Lane r of step s of a block is bytes 4s..4s+3 of row 16t + r's block (columns 4s..4s+3
    in the low nibbles, 16 + 4s.. in the high ones); a group's scales and offsets are its 16
    rows side by side."""
    torch.manual_seed(3)
    weight = quantize_groups(torch.randn(32, 96), 4, 64)
    laid = interleave_rows(weight)
    codes = unpack_codes(weight.codes, 4, 96).reshape(2, INTERLEAVED_ROWS, 3, 32)  # t, r, b, c
    steps = laid.codes.reshape(2, 3, 4, INTERLEAVED_ROWS, 4)  # t, b, s, r, byte
    low, high = steps & 15, steps >> 4
    for s in range(4):
        assert torch.equal(low[:, :, s].permute(0, 2, 1, 3), codes[..., 4 * s : 4 * s + 4])
        assert torch.equal(high[:, :, s].permute(0, 2, 1, 3), codes[..., 16 + 4 * s : 20 + 4 * s])
    for part, laid_part in ((weight.scale, laid.scale), (weight.offset, laid.offset)):
        lanes = laid_part.reshape(2, weight.groups, INTERLEAVED_ROWS).transpose(1, 2)
        assert torch.equal(lanes.reshape(32, weight.groups), part)


def test_int8_interleaved_refusals(kernel: QuantLinearKernel) -> None:
    """Only weights of whole 16-row tiles are interleaved; the kernel itself refuses
    anything else it is handed (None, and no write), as it does on other builds."""
    x = torch.randn(2, 96)
    for weight in (
        quantize_groups(torch.randn(24, 96), 4, 32),  # 24 rows: not whole tiles
        quantize_groups(torch.randn(40, 96), 8, 32),
    ):
        assert not kernel.can_interleave(weight)
        bound = kernel.bind(weight, interleave=True)
        assert bound is not None and bound.interleaved_arguments is None
        assert kernel.matmul_bound(x, BoundWeight(weight, weight), int8=True) is None


def test_layer_not_interleaved_keeps_the_builds_int8_limit() -> None:
    """A 4-bit layer whose rows are not whole tiles of 16 keeps the file's layout and its
    build's `int8_max_rows`: one row more dequantizes."""
    kernels = load_layer_kernels()
    assert kernels is not None and kernels.quant is not None
    quant = kernels.quant
    layer = GroupQuantLinear(96, [40], bits=4, group_size=32, bias=False,
                             dtype=torch.float32, device="cpu")  # fmt: skip
    layer.fill_rows(slice(None), quantize_groups(torch.randn(40, 96), 4, 32), "w")
    layer.kernels, layer.int8_activations = kernels, True
    limit = quant.int8_rows_for(layer.packed)
    assert limit is not None and limit == quant.int8_max_rows
    assert layer.rows_in_place == max(MAX_KERNEL_ROWS - 1, limit)
    whole = quant.dequantize(layer.packed, torch.float32)
    assert whole is not None
    x = torch.randn(limit + 1, 96)
    if limit:
        int8 = quant.matmul_int8(x[:limit], layer.packed)
        assert int8 is not None and torch.equal(layer(x[:limit]), int8)
    assert torch.equal(layer(x), F.linear(x, whole))
    assert layer._bound_weight is None or layer._bound_weight.interleaved is None
