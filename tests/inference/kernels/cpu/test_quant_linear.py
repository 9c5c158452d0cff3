"""The group-quantized matmul kernel (quant_linear.c) against dequantize-then-matmul.

Every build this machine makes is checked (quant_builds.py): the one for this processor
(AVX-512 where present), AVX2 forced, and the portable C one. The kernel widens each
weight to exactly the reference's float32 value, so only the order of the sums differs.
"""

from __future__ import annotations

import pytest
import torch

from inference.kernels.cpu.quant_linear import QuantLinearKernel, load_quant_linear
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
