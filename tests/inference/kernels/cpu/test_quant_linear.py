"""The group-quantized matmul kernel (quant_linear.c) against dequantize-then-matmul.

Every build this machine makes is checked (quant_builds.py): the one for this processor
(AVX-512 where present), AVX2 forced, and the portable C one. The kernel widens each
weight to exactly the reference's float32 value, so only the order of the sums differs.
"""

from __future__ import annotations

import pytest
import torch

from inference.kernels.cpu.layers import load_layer_kernels
from inference.kernels.cpu.quant_linear import QuantLinearKernel, load_quant_linear
from inference.model.quant.group_linear import GroupQuantLinear
from inference.model.quant.group_math import dequantize, quantize_groups
from tests.inference.kernels.cpu.quant_builds import BUILDS, expected_paths


@pytest.fixture(scope="module", params=list(BUILDS))
def kernel(request: pytest.FixtureRequest) -> QuantLinearKernel:
    built = load_quant_linear(BUILDS[request.param])
    assert built is not None
    assert (built.path, built.int8_path) == expected_paths(request.param)
    return built


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
@pytest.mark.parametrize(("rows", "cols"), [(7, 33), (65, 200), (130, 577)])
def test_matmul_matches_reference(
    kernel: QuantLinearKernel, bits: int, group_size: int, rows: int, cols: int
) -> None:
    torch.manual_seed(rows * cols + bits + group_size)
    weight = quantize_groups(torch.randn(rows, cols), bits, group_size)
    reference = dequantize(weight)
    for m in (*range(1, 16), 17):
        x = torch.randn(m, cols)
        expected = x @ reference.T
        got = kernel.matmul(x, weight)
        assert got is not None and got.dtype == torch.float32
        assert (got - expected).abs().max() <= 1e-5 * (1 + expected.abs().max())
        xb = x.bfloat16()
        got_bf16 = kernel.matmul(xb, weight)
        assert got_bf16 is not None and got_bf16.dtype == torch.bfloat16
        exact = xb.float() @ reference.T  # rounded once to bf16 by the kernel
        assert (got_bf16.float() - exact).abs().max() <= 1e-2 * (1 + exact.abs().max())


@pytest.mark.parametrize("bits", [4, 8])
def test_dequantize_is_bit_identical(kernel: QuantLinearKernel, bits: int) -> None:
    weight = quantize_groups(torch.randn(40, 161), bits, 64)
    as_float, as_bf16 = (
        kernel.dequantize(weight, torch.float32),
        kernel.dequantize(weight, torch.bfloat16),
    )
    assert as_float is not None and torch.equal(as_float, dequantize(weight))
    assert as_bf16 is not None and torch.equal(as_bf16, dequantize(weight).bfloat16())


def test_strided_rows_and_refusals(kernel: QuantLinearKernel) -> None:
    weight = quantize_groups(torch.randn(24, 96), 4, 32)
    wide = torch.randn(3, 200)
    x = wide[:, 10:106]  # rows 200 apart
    got = kernel.matmul(x, weight)
    assert got is not None
    expected = x @ dequantize(weight).T
    assert (got - expected).abs().max() <= 1e-5 * (1 + expected.abs().max())
    assert kernel.matmul(torch.randn(2, 95), weight) is None  # wrong width
    assert kernel.matmul(torch.randn(2, 96).half(), weight) is None  # float16: not taken


def test_layer_binds_its_weight_once_and_again_when_it_moves() -> None:
    """The layer checks its weight for the kernel once, then reuses it; new storage (a
    reload into other tensors, a move) is bound again, so no call reads stale pointers."""
    kernels = load_layer_kernels()
    assert kernels is not None and kernels.quant is not None
    layer = GroupQuantLinear(96, [40, 24], bits=4, group_size=32, bias=False,
                             dtype=torch.float32, device="cpu")  # fmt: skip
    first = quantize_groups(torch.randn(64, 96), 4, 32)
    layer.fill_rows(slice(None), first, "w")
    layer.kernels = kernels
    x = torch.randn(2, 96)
    assert torch.equal(layer(x), kernels.quant.matmul(x, first))
    bound = layer._bound_weight
    assert bound is not None
    layer(x)
    assert layer._bound_weight is bound  # not checked again
    second = quantize_groups(torch.randn(64, 96), 4, 32)
    layer.weight.data = second.codes.clone()  # new storage, as a reload would give
    layer.weight_scale = second.scale.clone()
    layer.weight_offset = second.offset.clone()
    assert torch.equal(layer(x), kernels.quant.matmul(x, second))
    assert layer._bound_weight is not bound
    layer.cpu()  # a move drops the bound copy (it would keep the old storage alive)
    assert layer._bound_weight is None
    assert torch.equal(layer(x), kernels.quant.matmul(x, second))
