"""The fused CPU layer kernels against the torch code they replace, in float32 and bf16."""

from __future__ import annotations

import pytest
import torch

from inference.kernels.cpu.layers import CpuLayerKernels, load_layer_kernels
from inference.model.layers.activation import silu_and_mul
from inference.model.layers.norm import RMSNorm
from inference.model.layers.rotary import RotaryEmbedding, apply_rotary

BUILDS = {"native": (), "portable": ("-mno-avx512f",)}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def kernels(build: str) -> CpuLayerKernels:
    loaded = load_layer_kernels(BUILDS[build])
    assert loaded is not None
    return loaded


def assert_matches(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """float32: to rounding. bf16: equal but for rare one-ulp ties of float32 ordering."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    if actual.dtype == torch.float32:
        torch.testing.assert_close(actual, expected, rtol=1e-6, atol=1e-6)
        return
    differ = (actual != expected).float().mean().item()
    assert differ < 1e-2, f"{differ:.2%} of values differ"
    torch.testing.assert_close(actual.float(), expected.float(), rtol=8e-3, atol=1e-6)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm(dtype: str, build: str) -> None:
    gen = torch.Generator().manual_seed(0)
    norm = RMSNorm(96, 1e-5, DTYPES[dtype], torch.device("cpu"))
    norm.weight.data.copy_(torch.randn(96, generator=gen))
    wide = (3 * torch.randn(50, 160, generator=gen)).to(DTYPES[dtype])
    x = wide[:, 32:128]  # rows 160 apart, as a view of a fused projection would be
    expected = norm(x)
    norm.kernels = kernels(build)
    assert_matches(norm(x), expected)
    assert_matches(norm(x.contiguous()), expected)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul(dtype: str, build: str) -> None:
    gate_up = (4 * torch.randn(70, 2 * 48, generator=torch.Generator().manual_seed(1))).to(
        DTYPES[dtype]
    )
    assert_matches(silu_and_mul(gate_up, kernels(build)), silu_and_mul(gate_up))


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_is_exact(dtype: str, build: str) -> None:
    """Each product and sum rounds as torch rounds it: the very same values."""
    gen = torch.Generator().manual_seed(2)
    fused = torch.randn(33, 7 * 32 + 40, generator=gen).to(DTYPES[dtype])
    x = fused[:, : 7 * 32].view(33, 7, 32)  # q|k heads of a fused qkv row
    rotary = RotaryEmbedding(32, 10000.0, None, torch.device("cpu"))
    cos, sin = rotary.cos_sin(torch.arange(100, 133), DTYPES[dtype])
    assert torch.equal(apply_rotary(x, cos, sin, kernels(build)), apply_rotary(x, cos, sin))


def test_what_the_kernels_do_not_take_falls_back_to_torch() -> None:
    fast = kernels("native")
    norm = RMSNorm(16, 1e-6, torch.float16, torch.device("cpu"))
    norm.kernels = fast
    x = torch.randn(4, 16).half()
    torch.testing.assert_close(norm(x), RMSNorm(16, 1e-6, torch.float16, torch.device("cpu"))(x))
    heads = torch.randn(3, 2, 16)  # a 3-D norm input (Qwen3's q/k norms): torch code
    norm32 = RMSNorm(16, 1e-6, torch.float32, torch.device("cpu"))
    expected = norm32(heads)
    norm32.kernels = fast
    assert torch.equal(norm32(heads), expected)
    assert not fast.accepts(torch.randn(4, 4).half())
    with pytest.raises(ValueError, match="silu_and_mul"):
        fast.silu_and_mul(torch.randn(4, 5))
