"""The fused CPU layer kernels against the torch code they replace, in float32 and bf16."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from inference.kernels.cpu.layers import CpuLayerKernels, load_layer_kernels
from inference.kernels.cpu.threads import (
    SMALL_CALL_ELEMENTS,
    single_thread_small_kernels,
    threads_for,
)
from inference.model.layers.activation import silu_and_mul
from inference.model.layers.norm import RMSNorm
from inference.model.layers.rotary import RotaryEmbedding, apply_rotary
from inference.model.loader import load_model
from inference.model.quant import Fp8Linear
from inference.model.quant.fp8_embedding import Fp8Embedding
from inference.model.quant.fp8_math import FP8_DTYPE, dequantize_weight_fp8
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.paged import PagedDriver

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
def test_add_rms_norm_is_the_add_then_the_norm(dtype: str, build: str) -> None:
    """The fused residual add gives torch's sum bit for bit, in place, and its norm is the
    unfused kernel's on that sum bit for bit (the same float order)."""
    gen = torch.Generator().manual_seed(5)
    norm = RMSNorm(96, 1e-5, DTYPES[dtype], torch.device("cpu"))
    norm.weight.data.copy_(torch.randn(96, generator=gen))
    x = (3 * torch.randn(50, 160, generator=gen)).to(DTYPES[dtype])[:, 32:128]  # strided rows
    residual = (3 * torch.randn(50, 96, generator=gen)).to(DTYPES[dtype])
    expected_sum = residual + x
    by_torch = norm(expected_sum)
    norm.kernels = kernels(build)
    unfused = norm(expected_sum)
    normed, summed = norm.add_forward(x, residual)
    assert summed.data_ptr() == residual.data_ptr()
    assert torch.equal(summed, expected_sum)
    assert torch.equal(normed, unfused)
    assert_matches(normed, by_torch)


def test_add_rms_norm_without_the_kernel_is_torchs_add_then_norm() -> None:
    gen = torch.Generator().manual_seed(6)
    norm = RMSNorm(32, 1e-6, torch.bfloat16, torch.device("cpu"))
    x, residual = torch.randn(2, 3, 4, 32, generator=gen).bfloat16()  # 3-D: the torch code
    norm.kernels = kernels("native")
    normed, summed = norm.add_forward(x, residual)
    assert torch.equal(summed, residual + x)
    assert torch.equal(normed, RMSNorm(32, 1e-6, torch.bfloat16, torch.device("cpu"))(summed))


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


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("group_size", [None, 16, 24])
def test_fp8_dequantize_gives_torchs_values(group_size: int | None, dtype: str, build: str) -> None:
    """Every e4m3 byte (NaN aside), scaled per row or per group (a ragged last group too)."""
    bytes_ = torch.arange(256, dtype=torch.uint8).repeat(2)
    bytes_ = bytes_[(bytes_ & 0x7F) != 0x7F].view(4, -1)  # 4 rows of 127 columns
    q = bytes_.view(FP8_DTYPE)
    shape = (4,) if group_size is None else (4, -(-q.shape[1] // group_size))
    scale = torch.rand(shape, generator=torch.Generator().manual_seed(3)) * 4
    expected = dequantize_weight_fp8(q, scale, DTYPES[dtype], group_size)
    actual = kernels(build).dequantize_fp8(q, scale, DTYPES[dtype], group_size)
    assert actual is not None and torch.equal(actual, expected)
    plain = kernels(build).dequantize_fp8(q, None, DTYPES[dtype])
    assert plain is not None and torch.equal(plain, q.to(DTYPES[dtype]))


def test_fp8_layers_dequantize_through_the_kernels(tmp_path: Path) -> None:
    """An FP8 model (linears and vocabulary) gives the same logits with and without them.

    Without the fused FP8 matmul, so that every layer dequantizes through `fp8_dequantize`
    (the fused path has its own tests in test_fp8_linear.py)."""
    model, config = load_model(
        make_checkpoint("smollm2", tmp_path), dtype="bfloat16", progress=False, quantization="fp8"
    )
    tokens = torch.randint(3, config.vocab_size, (20,), generator=torch.Generator().manual_seed(4))
    expected = PagedDriver(model, num_blocks=8).step({0: tokens.tolist()})
    dequantizing = kernels("native")
    dequantizing.fp8 = None
    model.set_layer_kernels(dequantizing)
    fp8_layers = [m for m in model.modules() if isinstance(m, Fp8Linear | Fp8Embedding)]
    assert fp8_layers and all(m.kernels is not None for m in fp8_layers)
    actual = PagedDriver(model, num_blocks=8).step({0: tokens.tolist()})
    torch.testing.assert_close(actual, expected, rtol=2e-2, atol=2e-2)


@pytest.fixture
def small_kernels_on_one_thread() -> Iterator[None]:
    single_thread_small_kernels(True)
    try:
        yield
    finally:
        single_thread_small_kernels(False)


def test_small_calls_take_one_thread_only_when_asked() -> None:
    threads = torch.get_num_threads()
    assert threads_for(576) == threads  # the default: every call on torch's threads
    single_thread_small_kernels(True)
    try:
        assert threads_for(576) == 1
        assert threads_for(SMALL_CALL_ELEMENTS) == threads
    finally:
        single_thread_small_kernels(False)
    assert threads_for(576) == threads


@pytest.mark.usefixtures("small_kernels_on_one_thread")
@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows_on_all_threads_give_what_each_row_alone_gives(dtype: str) -> None:
    """Past `SMALL_CALL_ELEMENTS` the kernels run on every thread, below it (with
    --single-thread-small-kernels) on one: each row comes out the same either way."""
    fast, dt = kernels("native"), DTYPES[dtype]
    gen = torch.Generator().manual_seed(7)
    rows, n = 2 * SMALL_CALL_ELEMENTS // 96, 96
    x = (3 * torch.randn(rows, n, generator=gen)).to(dt)
    residual = (3 * torch.randn(rows, n, generator=gen)).to(dt)
    weight = torch.randn(n, generator=gen).to(dt)
    cos, sin = RotaryEmbedding(32, 1e4, None, torch.device("cpu")).cos_sin(torch.arange(rows), dt)
    normed = fast.rms_norm(x, weight, 1e-5)
    added, summed = fast.add_rms_norm(x, residual.clone(), weight, 1e-5)
    silu = fast.silu_and_mul(torch.cat([x, residual], dim=1))
    rotated = fast.rotary(x.view(rows, 3, 32), cos, sin)
    for r in (0, rows // 2, rows - 1):
        one = slice(r, r + 1)
        assert torch.equal(normed[one], fast.rms_norm(x[one], weight, 1e-5))
        alone = fast.add_rms_norm(x[one], residual[one].clone(), weight, 1e-5)
        assert torch.equal(added[one], alone[0]) and torch.equal(summed[one], alone[1])
        assert torch.equal(silu[one], fast.silu_and_mul(torch.cat([x[one], residual[one]], 1)))
        assert torch.equal(rotated[one], fast.rotary(x[one].view(1, 3, 32), cos[one], sin[one]))
