"""The per-row FP8 matmul for a few tokens against float32 arithmetic, interpreted."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.triton.fp8_gemv import fp8_gemv
from inference.model.quant.fp8_math import quantize_weight_fp8


@pytest.mark.parametrize(
    ("tokens", "out_features", "in_features", "block_k"),
    [
        (1, 40, 48, None),  # one decode token; partial tiles of outputs and of K
        (3, 100, 576, None),  # SmolLM2's hidden size: a partial last K tile
        (16, 64, 200, 64),  # a full tile of tokens; K over several tiles, the last partial
        (21, 33, 96, 32),  # more than one tile of tokens
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fp8_gemv_matches_float32_arithmetic(
    tokens: int, out_features: int, in_features: int, block_k: int | None, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(tokens * out_features)
    weight = (
        torch.randn(out_features, in_features, generator=gen)
        * torch.logspace(-2, 1, out_features)[:, None]
    )  # rows of very different size: each its own scale
    q, scale = quantize_weight_fp8(weight)
    x = torch.randn(tokens, in_features, generator=gen).to(dtype)
    actual = fp8_gemv(x, q, scale, block_k=block_k)
    assert actual.dtype == dtype and actual.shape == (tokens, out_features)
    expected = (x.float() @ q.float().T) * scale
    if dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-4)
    else:  # one rounding of the float32 result to bf16 (the interpreter truncates: 1 ulp)
        torch.testing.assert_close(actual.float(), expected, rtol=2**-7, atol=1e-3)


def test_fp8_gemv_keeps_leading_dimensions_and_checks_its_operands() -> None:
    q, scale = quantize_weight_fp8(torch.randn(24, 32))
    x = torch.randn(2, 3, 32)
    out = fp8_gemv(x, q, scale)
    assert out.shape == (2, 3, 24)
    torch.testing.assert_close(out, (x.float() @ q.float().T) * scale, rtol=1e-5, atol=1e-4)
    assert fp8_gemv(torch.empty(0, 32), q, scale).shape == (0, 24)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        fp8_gemv(x, q.float(), scale)
    with pytest.raises(ValueError, match="scale"):
        fp8_gemv(x, q, scale[:, None])
    with pytest.raises(ValueError, match="features"):
        fp8_gemv(torch.randn(1, 31), q, scale)
