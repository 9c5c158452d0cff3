"""Fp8Linear and the FP8 KV encoding on their own: error bounds, shards, swaps, bad input."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from inference.engine.engine_config import EngineConfig
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache, to_cache_dtype
from inference.model.layers.embedding import VocabEmbedding
from inference.model.layers.linear import FusedLinear, Linear
from inference.model.quant import (
    Fp8Embedding,
    Fp8Linear,
    fp8_math,
    quantize_model_fp8,
    quantize_weight_fp8,
)
from inference.model.quant.fp8_math import FP8_DTYPE, dequantize_weight_fp8

# e4m3 keeps 3 mantissa bits: rounding moves a normal value by at most 1/16 of itself.
E4M3_RELATIVE = 1 / 16


def fused(shards: list[int], *, bias: bool = True, seed: int = 0) -> FusedLinear:
    torch.manual_seed(seed)
    layer = FusedLinear(48, shards, bias=bias, dtype=torch.float32, device=torch.device("cpu"))
    with torch.no_grad():
        # Rows of very different magnitude: a per-tensor scale would crush the small ones.
        magnitudes = torch.logspace(-3, 1, layer.weight.shape[0])[:, None]
        layer.weight.copy_(torch.randn_like(layer.weight) * magnitudes)
        if layer.bias is not None:
            layer.bias.normal_()
    return layer


def test_quantize_dequantize_error_is_within_e4m3_rounding() -> None:
    weight = fused([40]).weight.data
    q, scale = quantize_weight_fp8(weight)
    assert q.dtype == FP8_DTYPE and q.shape == weight.shape
    assert scale.dtype == torch.float32 and scale.shape == (40,)
    # Each row's largest value maps to 448, the top of the e4m3 range.
    assert torch.equal(q.float().abs().amax(dim=1), torch.full((40,), 448.0))
    back = dequantize_weight_fp8(q, scale, torch.float32)
    normal = weight.abs() >= scale[:, None] * 2**-6  # below that e4m3 is subnormal
    error = (back - weight).abs()
    assert bool((error[normal] <= E4M3_RELATIVE * weight.abs()[normal] + 1e-12).all())
    assert bool((error <= scale[:, None] * 2**-9).logical_or(normal).all())
    relative_rms = (error.norm() / weight.norm()).item()
    assert 0.005 < relative_rms < 0.04  # real rounding happened, and not more than e4m3's


def test_fp8_linear_matches_the_layer_it_replaces() -> None:
    layer = fused([24, 8, 8])
    fp8 = Fp8Linear.from_linear(layer)
    assert fp8.weight.dtype == FP8_DTYPE and fp8.bias is not None
    x = torch.randn(7, 48)
    expected = layer(x)
    out = fp8(x)
    assert out.shape == expected.shape == (7, 40)
    # The exact result of the dequantized weight, and close to the original.
    q, scale = quantize_weight_fp8(layer.weight.data)
    exact = x @ dequantize_weight_fp8(q, scale, torch.float32).T + layer.bias
    torch.testing.assert_close(out, exact, rtol=1e-5, atol=1e-5)
    assert ((out - expected).norm() / expected.norm()).item() < 0.05


def test_fp8_linear_keeps_the_shard_layout_callers_split_by() -> None:
    layer = fused([24, 8, 8])
    fp8 = Fp8Linear.from_linear(layer)
    assert fp8.shard_sizes == [24, 8, 8] and fp8.num_shards == 3 and fp8.out_features == 40
    assert [fp8.shard_rows(i) for i in range(3)] == [layer.shard_rows(i) for i in range(3)]
    x = torch.randn(3, 48)
    q, k, v = fp8(x).split(fp8.shard_sizes, dim=-1)
    full = layer(x)
    for shard, part in enumerate((q, k, v)):
        reference = full[:, layer.shard_rows(shard)]
        assert ((part - reference).norm() / reference.norm()).item() < 0.05


def test_load_shard_spreads_a_per_tensor_scale_over_its_rows() -> None:
    fp8 = Fp8Linear(16, [8, 4], bias=False, dtype=torch.float32, device="cpu")
    fp8.load_shard("weight", 0, torch.ones(8, 16).to(FP8_DTYPE), "q.weight")
    fp8.load_shard("weight", 1, torch.full((4, 16), 2.0).to(FP8_DTYPE), "k.weight")
    fp8.load_shard("weight_scale", 0, torch.tensor(0.5), "q.weight_scale")
    fp8.load_shard("weight_scale", 1, torch.full((4, 1), 0.25), "k.weight_scale")
    assert fp8.weight_scale.tolist() == [0.5] * 8 + [0.25] * 4
    out = fp8(torch.ones(1, 16))
    assert out.tolist() == [[8.0] * 8 + [8.0] * 4]  # 16 * 1 * 0.5 and 16 * 2 * 0.25


@pytest.mark.parametrize(
    ("param", "tensor", "message"),
    [
        ("weight", torch.ones(8, 16), "needs e4m3"),
        ("weight", torch.ones(8, 15).to(FP8_DTYPE), "shape"),
        ("weight_scale", torch.ones(3), "expected a scalar"),
        ("weight_scale", torch.tensor(-1.0), "not positive"),
        ("input_scale", torch.tensor(1.0), "no input_scale"),
        ("bias", torch.ones(8), "no bias"),
    ],
)
def test_load_shard_rejects_bad_tensors(param: str, tensor: torch.Tensor, message: str) -> None:
    fp8 = Fp8Linear(16, [8, 4], bias=False, dtype=torch.float32, device="cpu")
    with pytest.raises(ValueError, match=message):
        fp8.load_shard(param, 0, tensor, f"x.{param}")


def test_bad_layer_and_engine_config_are_value_errors() -> None:
    with pytest.raises(ValueError, match="shard sizes"):
        Fp8Linear(16, [8, 0], bias=False, dtype=torch.float32, device="cpu")
    with pytest.raises(ValueError, match="activation dtype"):
        Fp8Linear(16, [8], bias=False, dtype=torch.int8, device="cpu")
    with pytest.raises(ValueError, match="quantization"):
        EngineConfig(model="m", quantization="int4")
    with pytest.raises(ValueError, match="kv_cache_dtype"):
        EngineConfig(model="m", kv_cache_dtype="fp16")
    config = EngineConfig(model="m", quantization="fp8", kv_cache_dtype="fp8")
    assert (config.quantization, config.kv_cache_dtype) == ("fp8", "fp8")


class Wrapper(nn.Module):
    """Stands in for a tensor-parallel wrapper around a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Linear(8, 8, bias=False, dtype=torch.float32, device=torch.device("cpu"))


def test_quantize_model_swaps_every_linear_and_the_vocabulary() -> None:
    model = nn.Module()
    model.layers = nn.ModuleList([Wrapper(), Wrapper()])
    model.proj = Linear(8, 4, bias=True, dtype=torch.float32, device=torch.device("cpu"))
    model.lm_head = Linear(32, 4, bias=False, dtype=torch.float32, device=torch.device("cpu"))
    model.embed = VocabEmbedding(4, 32, torch.float32, torch.device("cpu"))
    model.other = nn.Embedding(4, 8)
    for p in model.parameters():
        nn.init.normal_(p)
    assert quantize_model_fp8(model) == 4
    assert all(isinstance(w.inner, Fp8Linear) for w in model.layers)
    assert isinstance(model.proj, Fp8Linear) and model.proj.bias is not None
    assert model.proj.group_size is None and model.proj.weight_scale.shape == (4,)
    assert isinstance(model.lm_head, Fp8Linear) and model.lm_head.group_size == 16
    assert model.lm_head.weight_scale.shape == (4, 2)
    assert isinstance(model.embed, Fp8Embedding) and isinstance(model.other, nn.Embedding)
    assert not any(isinstance(m, FusedLinear) for m in model.modules())


def test_quantize_model_can_keep_the_vocabulary() -> None:
    model = nn.Module()
    model.proj = Linear(8, 4, bias=False, dtype=torch.float32, device=torch.device("cpu"))
    model.lm_head = Linear(8, 4, bias=False, dtype=torch.float32, device=torch.device("cpu"))
    model.embed = VocabEmbedding(4, 8, torch.float32, torch.device("cpu"))
    assert quantize_model_fp8(model, vocab=False) == 1
    assert type(model.lm_head) is Linear and type(model.embed) is VocabEmbedding


def test_grouped_scales_store_each_groups_largest_value_exactly() -> None:
    torch.manual_seed(0)
    weight = torch.randn(6, 40) * torch.logspace(-2, 1, 40)  # columns of very unequal size
    q, scale = quantize_weight_fp8(weight, 16)  # 40 columns: groups of 16, 16 and 8
    assert scale.shape == (6, 3)
    for g, cols in enumerate((slice(0, 16), slice(16, 32), slice(32, 40))):
        assert torch.equal(q[:, cols].float().abs().amax(dim=1), torch.full((6,), 448.0))
        torch.testing.assert_close(scale[:, g], weight[:, cols].abs().amax(dim=1) / 448)
    back = dequantize_weight_fp8(q, scale, torch.float32, 16)
    per_row = dequantize_weight_fp8(*quantize_weight_fp8(weight), torch.float32)
    assert (back - weight).norm() < (per_row - weight).norm()  # small columns kept better
    with pytest.raises(ValueError, match="group_size"):
        quantize_weight_fp8(weight, 0)


def test_grouped_fp8_linear_matches_its_dequantized_weight_in_slices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = fused([24, 8, 8])
    fp8 = Fp8Linear.from_linear(layer, group_size=16)
    assert fp8.weight_scale.shape == (40, 3) and not fp8._use_scaled_mm
    x = torch.randn(5, 48)
    q, scale = quantize_weight_fp8(layer.weight.data, 16)
    exact = x @ dequantize_weight_fp8(q, scale, torch.float32, 16).T + layer.bias
    torch.testing.assert_close(fp8(x), exact, rtol=1e-5, atol=1e-5)
    # A weight bigger than one dequantized slice is done in slices of rows.
    monkeypatch.setattr(fp8_math, "DEQUANT_SLICE_ELEMENTS", 7 * 48)
    torch.testing.assert_close(fp8(x), exact, rtol=1e-5, atol=1e-5)
    fp8.load_shard("weight_scale", 1, torch.full((8, 3), 0.5), "k.weight_scale")
    assert fp8.weight_scale[24:32].eq(0.5).all()
    with pytest.raises(ValueError, match=r"expected \(8, 3\)"):
        fp8.load_shard("weight_scale", 1, torch.ones(8), "k.weight_scale")
    with pytest.raises(ValueError, match="block_rows needs a group_size"):
        Fp8Linear(48, [8], bias=False, dtype=torch.float32, device="cpu", block_rows=16)


def test_block_scales_spread_over_their_rows_on_load() -> None:
    # Blocks of 16 rows x 32 columns over shards of 24 and 8 rows and 48 columns:
    # partial blocks at the end of both.
    fp8 = Fp8Linear(48, [24, 8], bias=False, dtype=torch.float32, device="cpu", group_size=32)
    fp8.block_rows = 16
    fp8.load_shard("weight", 0, torch.ones(24, 48).to(FP8_DTYPE), "q.weight")
    fp8.load_shard("weight", 1, torch.ones(8, 48).to(FP8_DTYPE), "k.weight")
    fp8.load_shard("weight_scale", 0, torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "q.weight_scale")
    fp8.load_shard("weight_scale", 1, torch.tensor([[5.0, 6.0]]), "k.weight_scale")
    expected = [[1.0, 2.0]] * 16 + [[3.0, 4.0]] * 8 + [[5.0, 6.0]] * 8
    assert fp8.weight_scale.tolist() == expected
    # Row sums: 32 columns at the first scale, 16 at the second.
    out = fp8(torch.ones(1, 48))[0]
    assert out.tolist() == [32 * a + 16 * b for a, b in expected]
    with pytest.raises(ValueError, match=r"expected \(1, 2\)"):
        fp8.load_shard("weight_scale", 1, torch.ones(8, 2), "k.weight_scale")


def test_fp8_embedding_looks_up_and_unembeds_one_table() -> None:
    torch.manual_seed(0)
    table = VocabEmbedding(10, 32, torch.bfloat16, torch.device("cpu"))
    table.weight.data.normal_()
    fp8 = Fp8Embedding.from_embedding(table, group_size=16)
    assert fp8.weight.dtype == FP8_DTYPE and fp8.weight_scale.shape == (10, 2)
    dequantized = dequantize_weight_fp8(fp8.weight, fp8.weight_scale, torch.bfloat16, 16)
    ids = torch.tensor([3, 0, 3, 9])
    rows = fp8(ids)
    assert rows.dtype == torch.bfloat16 and torch.equal(rows, dequantized[ids])
    hidden = torch.randn(3, 32, dtype=torch.bfloat16)
    torch.testing.assert_close(fp8.unembed(hidden), hidden @ dequantized.T)
    relative = (fp8.unembed(hidden) - table.unembed(hidden)).norm() / table.unembed(hidden).norm()
    assert relative.item() < 0.05


def test_kv_encoding_clamps_and_scales() -> None:
    x = torch.tensor([[[0.5, -3.0, 1000.0, -1000.0]]])
    stored = to_cache_dtype(x, FP8_KV_DTYPE, 1.0)
    assert stored.dtype == FP8_KV_DTYPE
    assert stored.float().tolist() == [[[0.5, -3.0, 448.0, -448.0]]]  # saturates, no NaN
    scaled = to_cache_dtype(x, FP8_KV_DTYPE, 4.0)  # 1000 / 4 = 250 rounds to 256 in e4m3
    assert (scaled.float() * 4.0).tolist() == [[[0.5, -3.0, 1024.0, -1024.0]]]
    assert to_cache_dtype(x, torch.bfloat16, 4.0).dtype == torch.bfloat16  # scale unused
    pool = torch.zeros(2, 4, 1, 4, dtype=FP8_KV_DTYPE)
    cache = KVCache(pool, pool.clone(), k_scale=2.0)
    key, value = cache
    assert key is cache.key and value is cache.value and cache.is_fp8
    assert (cache.k_scale, cache.v_scale) == (2.0, 1.0)
    with pytest.raises(ValueError, match="k_scale"):
        KVCache(pool, pool, k_scale=0.0)
