"""Fp8Linear's torch._scaled_mm path, run on the CPU.

On CUDA 8.9+ a per-row FP8 layer quantizes each token's activations to e4m3 and calls
``torch._scaled_mm`` (row-wise scales on both sides). torch's CPU build runs the same op
on float8 tensors, so the method is called directly here, with the arguments it passes
on a GPU, and checked two ways:

- against the same arithmetic written out in float64 on the quantized activations: only
  the output's rounding to the activation dtype may differ (this catches a scale on the
  wrong side, a missing row scale, a wrong static scale or a lost bias);
- against the dequantizing path: the difference must stay within what rounding the
  activations to e4m3 (3 mantissa bits) can cause, bounded element by element.
"""

from __future__ import annotations

import pytest
import torch

from inference.kernels.profile import scaled_mm_runs
from inference.model.layers.linear import FusedLinear
from inference.model.quant import Fp8Linear
from inference.model.quant.fp8_math import FP8_DTYPE, FP8_MAX, MIN_SCALE

IN_FEATURES = 64
SHARDS = [32, 16, 16]  # q|k|v-like fused shards, each a multiple of 16 as _scaled_mm needs
E4M3_RELATIVE = 1 / 16  # rounding to e4m3 moves a normal value by at most this share


def fp8_layer(*, bias: bool, dtype: torch.dtype, input_scale: bool = False) -> Fp8Linear:
    torch.manual_seed(0)
    linear = FusedLinear(IN_FEATURES, SHARDS, bias=bias, dtype=dtype, device=torch.device("cpu"))
    with torch.no_grad():
        # Rows of very different magnitude: a per-tensor weight scale would not do.
        magnitudes = torch.logspace(-3, 1, linear.weight.shape[0])[:, None]
        linear.weight.copy_((torch.randn(linear.weight.shape) * magnitudes).to(dtype))
        if linear.bias is not None:
            linear.bias.normal_()
    layer = Fp8Linear.from_linear(linear)
    if input_scale:  # as a checkpoint with static activation scales loads
        static = Fp8Linear(
            IN_FEATURES, SHARDS, bias=bias, dtype=dtype, device="cpu", input_scale=True
        )
        for shard in range(len(SHARDS)):
            rows = layer.shard_rows(shard)
            static.load_shard("weight", shard, layer.weight.data[rows], "w")
            static.load_shard("weight_scale", shard, layer.weight_scale.data[rows], "s")
            if layer.bias is not None:
                static.load_shard("bias", shard, layer.bias.data[rows], "b")
        layer = static
    return layer


def activations(tokens: int, dtype: torch.dtype, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    # Tokens of very different magnitude: each needs its own scale.
    magnitudes = torch.logspace(-2, 2, tokens)[:, None]
    return (torch.randn(tokens, IN_FEATURES, generator=gen) * magnitudes).to(dtype)


def written_out(
    layer: Fp8Linear, x: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The scaled matmul in float64 on e4m3 activations (without bias), the bias (or 0),
    and the sums of the products' magnitudes (which bound float32 accumulation error)."""
    x2 = x.reshape(-1, IN_FEATURES).double()
    if layer.input_scale is not None:
        scale = layer.input_scale.double().expand(x2.shape[0], 1)
    else:
        scale = (x2.abs().amax(dim=1, keepdim=True) / FP8_MAX).clamp(min=MIN_SCALE)
    # float32 as the layer divides, then e4m3 as it rounds.
    xq = (x2.float() / scale.float()).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).double()
    weight = layer.weight.double() * layer.weight_scale.double()[:, None]
    y = (xq * scale) @ weight.T
    magnitudes = (xq * scale).abs() @ weight.abs().T
    bias = torch.zeros(()) if layer.bias is None else layer.bias.double()
    shape = (*x.shape[:-1], -1)
    return y.reshape(shape), bias, magnitudes.reshape(shape)


def assert_rounding_only(layer: Fp8Linear, x: torch.Tensor, out: torch.Tensor) -> None:
    y, bias, magnitudes = written_out(layer, x)
    # Products summed in float32 (each addition off by 2**-24 of the running sum at
    # most), rounded to the output dtype once, and the sum with the bias once more.
    ulp = 2.0**-8 if out.dtype == torch.bfloat16 else 2.0**-23
    accumulation = IN_FEATURES * 2.0**-24 * magnitudes
    tolerance = 2 * ulp * (y.abs() + bias.abs()) + accumulation + 1e-30
    error = (out.double() - (y + bias)).abs()
    assert bool((error <= tolerance).all()), float((error / tolerance).max())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tokens", [1, 3, 7, 13])
def test_dynamic_scales_match_the_written_out_arithmetic(
    dtype: torch.dtype, bias: bool, tokens: int
) -> None:
    layer = fp8_layer(bias=bias, dtype=dtype)
    x = activations(tokens, dtype)
    out = layer._forward_scaled_mm(x)
    assert out.dtype == dtype and out.shape == (tokens, sum(SHARDS))
    assert_rounding_only(layer, x, out)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tokens", [1, 5, 11])
def test_dynamic_scales_stay_within_e4m3_rounding_of_the_dequantizing_path(
    bias: bool, tokens: int
) -> None:
    layer = fp8_layer(bias=bias, dtype=torch.bfloat16)
    x = activations(tokens, torch.bfloat16, seed=tokens)
    scaled, dequant = layer._forward_scaled_mm(x), layer._forward_dequant(x)
    # Each activation moves by at most 1/16 of itself (or, below e4m3's normal range, by
    # half its spacing there), each output by that times |w|; plus both outputs' bf16
    # rounding.
    weight = (layer.weight.float() * layer.weight_scale[:, None]).abs()
    x_scale = x.float().abs().amax(dim=1, keepdim=True) / FP8_MAX
    moved = x.float().abs() * E4M3_RELATIVE + x_scale * 2.0**-10
    bound = moved @ weight.T + 2.0**-7 * (dequant.float().abs() + scaled.float().abs())
    difference = (scaled.float() - dequant.float()).abs()
    assert bool((difference <= bound).all())
    # e4m3 rounding really happened: the paths are not the same arithmetic.
    assert not torch.equal(scaled, dequant)


def test_each_fused_shard_keeps_its_own_rows() -> None:
    """Each shard's rows equal a layer of that shard alone: no row scale is misplaced."""
    layer = fp8_layer(bias=True, dtype=torch.bfloat16)
    x = activations(6, torch.bfloat16)
    fused = layer._forward_scaled_mm(x)
    for shard, size in enumerate(SHARDS):
        rows = layer.shard_rows(shard)
        alone = Fp8Linear(IN_FEATURES, [size], bias=True, dtype=torch.bfloat16, device="cpu")
        alone.weight.data.copy_(layer.weight.data[rows])
        alone.weight_scale.data.copy_(layer.weight_scale.data[rows])
        assert layer.bias is not None and alone.bias is not None
        alone.bias.data.copy_(layer.bias.data[rows])
        assert torch.equal(alone._forward_scaled_mm(x), fused[:, rows])


def test_leading_dimensions_are_kept() -> None:
    layer = fp8_layer(bias=True, dtype=torch.bfloat16)
    x = activations(10, torch.bfloat16).reshape(2, 5, IN_FEATURES)
    out = layer._forward_scaled_mm(x)
    assert out.shape == (2, 5, sum(SHARDS))
    assert torch.equal(out.reshape(10, -1), layer._forward_scaled_mm(x.reshape(10, -1)))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("tokens", [1, 4, 9])
def test_a_static_input_scale_is_the_largest_shards_and_serves_every_token(
    bias: bool, tokens: int
) -> None:
    layer = fp8_layer(bias=bias, dtype=torch.bfloat16, input_scale=True)
    for shard, value in enumerate((0.02, 0.05, 0.03)):
        layer.load_shard("input_scale", shard, torch.tensor(value), f"shard{shard}.input_scale")
    assert layer.input_scale is not None
    assert layer.input_scale.item() == pytest.approx(0.05)
    # Magnitudes up to about 40: within 448 * 0.05 = 22.4 for most, clipped for some.
    x = (torch.randn(tokens, IN_FEATURES, generator=torch.Generator().manual_seed(3)) * 10).to(
        torch.bfloat16
    )
    out = layer._forward_scaled_mm(x)
    assert_rounding_only(layer, x, out)
    # The scale is the checkpoint's, not the token's own: a dynamic layer differs.
    dynamic = fp8_layer(bias=bias, dtype=torch.bfloat16)
    assert not torch.equal(out, dynamic._forward_scaled_mm(x))


def test_a_static_scale_clips_what_exceeds_it() -> None:
    layer = fp8_layer(bias=False, dtype=torch.bfloat16, input_scale=True)
    layer.load_shard("input_scale", 0, torch.tensor(1 / 448), "input_scale")  # covers |x| <= 1
    x = torch.zeros(3, IN_FEATURES, dtype=torch.bfloat16)
    x[:, 0] = torch.tensor([0.5, 1.0, 100.0])  # the last is clipped to 1
    out = layer._forward_scaled_mm(x).float()
    weight = layer.weight.float()[:, 0] * layer.weight_scale
    expected = torch.stack([0.5 * weight, weight, weight]).to(torch.bfloat16).float()
    assert torch.allclose(out, expected, rtol=2**-7, atol=0)


def test_a_cpu_layer_does_not_take_the_scaled_path() -> None:
    layer = fp8_layer(bias=True, dtype=torch.bfloat16)
    assert layer._use_scaled_mm is False
    x = activations(3, torch.bfloat16)
    assert torch.equal(layer(x), layer._forward_dequant(x))


def test_the_path_is_the_profiles_and_never_changes_per_call() -> None:
    """`use_paths` fixes a layer's path; only per-row layers whose dimensions are multiples
    of 16 take _scaled_mm (what it accepts), and a probe decides whether it runs at all."""
    assert scaled_mm_runs(torch.device("cpu"), torch.bfloat16)  # torch's CPU build has it
    layer = fp8_layer(bias=True, dtype=torch.bfloat16)
    x = activations(3, torch.bfloat16)
    layer.use_paths(scaled_mm=True, triton=False)
    assert torch.equal(layer(x), layer._forward_scaled_mm(x))
    assert not torch.equal(layer(x), layer._forward_dequant(x))
    layer.use_paths(scaled_mm=False, triton=False)
    assert torch.equal(layer(x), layer._forward_dequant(x))
    odd = Fp8Linear(24, [40], bias=False, dtype=torch.bfloat16, device="cpu")
    grouped = Fp8Linear(64, [32], bias=False, dtype=torch.bfloat16, device="cpu", group_size=32)
    for other in (odd, grouped):
        other.use_paths(scaled_mm=True, triton=False)
        assert other._use_scaled_mm is False
