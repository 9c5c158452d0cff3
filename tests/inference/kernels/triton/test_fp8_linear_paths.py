"""Fp8Linear's CUDA paths with triton, run here under the interpreter: up to 16 tokens the
weight-only kernel, more the fused quantizer before torch._scaled_mm (which torch's CPU
build runs too)."""

from __future__ import annotations

import torch

from inference.model.layers.linear import FusedLinear
from inference.model.quant import Fp8Linear
from inference.model.quant.fp8 import MAX_GEMV_TOKENS

IN_FEATURES, SHARDS = 64, [32, 16, 16]


def fp8_layer(*, input_scale: bool = False) -> Fp8Linear:
    torch.manual_seed(0)
    linear = FusedLinear(
        IN_FEATURES, SHARDS, bias=True, dtype=torch.bfloat16, device=torch.device("cpu")
    )
    with torch.no_grad():
        magnitudes = torch.logspace(-3, 1, linear.weight.shape[0])[:, None]
        linear.weight.copy_((torch.randn(linear.weight.shape) * magnitudes).bfloat16())
        assert linear.bias is not None
        linear.bias.normal_()
    layer = Fp8Linear.from_linear(linear)
    if input_scale:
        layer.input_scale = torch.nn.Parameter(torch.tensor([0.05]), requires_grad=False)
    return layer


def activations(tokens: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(tokens)
    magnitudes = torch.logspace(-2, 2, tokens)[:, None]
    return (torch.randn(tokens, IN_FEATURES, generator=gen) * magnitudes).bfloat16()


def test_a_few_tokens_take_the_weight_only_kernel() -> None:
    layer = fp8_layer()
    layer.use_paths(scaled_mm=True, triton=True)
    assert layer._gemv is not None
    x = activations(3).view(1, 3, IN_FEATURES)  # leading dimensions are kept
    y = layer(x)
    assert y.shape == (1, 3, sum(SHARDS)) and y.dtype == torch.bfloat16
    # Weight-only: the activations are not rounded to e4m3, so the result is the float
    # arithmetic on the e4m3 weight, rounded once to bf16 (the interpreter truncates).
    weight = layer.weight.float() * layer.weight_scale.float().reshape(-1, 1)
    assert layer.bias is not None
    expected = x.float() @ weight.T + layer.bias.float()
    torch.testing.assert_close(y.float(), expected, rtol=2**-6, atol=1e-2)
    # The dynamic path rounds the activations to e4m3: a visibly different result.
    gemv, layer._gemv = layer._gemv, None
    dynamic = layer(x)
    layer._gemv = gemv
    assert not torch.equal(y, dynamic)


def test_more_tokens_take_the_fused_quantizer_bit_for_bit() -> None:
    layer = fp8_layer()
    x = activations(MAX_GEMV_TOKENS + 4)
    layer.use_paths(scaled_mm=True, triton=False)  # torch ops quantize
    expected = layer(x)
    layer.use_paths(scaled_mm=True, triton=True)  # the Triton quantizer
    assert torch.equal(layer(x), expected)


def test_a_static_input_scale_keeps_scaled_mm() -> None:
    layer = fp8_layer(input_scale=True)
    layer.use_paths(scaled_mm=True, triton=True)
    assert layer._gemv is None
    layer.use_paths(scaled_mm=False, triton=True)
    assert layer._gemv is None
