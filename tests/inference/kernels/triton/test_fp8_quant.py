"""The fused per-token FP8 activation quantizer against its torch ops, interpreted."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.triton.fp8_quant import per_token_quant_fp8
from inference.model.quant.fp8_math import FP8_MAX, quantize_tokens_fp8


@pytest.mark.parametrize("tokens", [1, 3, 17])
@pytest.mark.parametrize("features", [48, 576, 200])  # 200: a partial power-of-two block
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_per_token_quant_matches_the_torch_ops_bit_for_bit(
    tokens: int, features: int, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(tokens * features)
    # Rows of very different size, one all zeros (the smallest scale), one tiny.
    x = torch.randn(tokens, features, generator=gen) * torch.logspace(-3, 2, tokens)[:, None]
    x[0] = 0.0
    x = x.to(dtype)
    q, scale = per_token_quant_fp8(x)
    want_q, want_scale = quantize_tokens_fp8(x)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape
    assert scale.dtype == torch.float32 and scale.shape == (tokens, 1)
    assert torch.equal(scale, want_scale)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    # Each row's largest value lands on the format's largest, and dequantizes back.
    rows = x[1:].float().abs().amax(dim=1)
    assert torch.equal(q[1:].float().abs().amax(dim=1), torch.full_like(rows, FP8_MAX))
    torch.testing.assert_close(q.float() * scale, x.float(), rtol=0.07, atol=1e-3 * 2**-6)


def test_a_negative_value_too_small_for_e4m3_is_negative_zero() -> None:
    x = torch.tensor([[448.0, -1e-4, 1e-4, -0.5]])
    q, _ = per_token_quant_fp8(x)
    assert q.view(torch.uint8).tolist() == [[0x7E, 0x80, 0x00, 0xB0]]
    assert torch.equal(q.view(torch.uint8), quantize_tokens_fp8(x)[0].view(torch.uint8))


def test_per_token_quant_takes_a_strided_view_and_no_tokens() -> None:
    x = torch.randn(4, 64, dtype=torch.bfloat16)[:, :48]
    q, scale = per_token_quant_fp8(x)
    want_q, want_scale = quantize_tokens_fp8(x)
    assert torch.equal(q.view(torch.uint8), want_q.view(torch.uint8))
    assert torch.equal(scale, want_scale)
    empty_q, empty_scale = per_token_quant_fp8(torch.empty(0, 48))
    assert empty_q.shape == (0, 48) and empty_scale.shape == (0, 1)
    with pytest.raises(ValueError, match="2-D"):
        per_token_quant_fp8(torch.zeros(2, 3, 48))
