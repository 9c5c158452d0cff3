"""Sharding without processes: which rows and columns each rank keeps, and the checks.

The layers are compared against the unsharded one numerically: splitting a fused layer
by columns and a row layer by its input must give back the full layer's output.
"""

from __future__ import annotations

import argparse
import multiprocessing
from pathlib import Path

import pytest
import torch

from inference import LLM
from inference.engine.engine_config import EngineConfig
from inference.model.arch import ArchConfig
from inference.model.layers.linear import FusedLinear
from inference.model.llama import LlamaAttention, LlamaForCausalLM, LlamaMLP
from inference.model.quant import quantize_model_fp8
from inference.model.quant.fp8 import Fp8Linear
from inference.model.quant.group_linear import GroupQuantLinear
from inference.parallel.sharding import (
    RowParallel,
    check_tensor_parallel,
    column_rows,
    column_shard,
    local_arch,
    row_shard,
    shard_model,
)
from inference.server.cli import add_arguments, engine_config_kwargs
from tests.inference.checkpoints import make_checkpoint


def arch(**overrides: object) -> ArchConfig:
    hf = {
        "architectures": ["Qwen2ForCausalLM"],
        "vocab_size": 64,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        **overrides,
    }
    return ArchConfig.from_hf_config(hf)


def random_linear(shards: list[int], *, bias: bool, in_features: int = 32) -> FusedLinear:
    layer = FusedLinear(
        in_features, shards, bias=bias, dtype=torch.float32, device=torch.device("cpu")
    )
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        layer.weight.copy_(torch.randn(layer.weight.shape, generator=gen))
        if layer.bias is not None:
            layer.bias.copy_(torch.randn(layer.bias.shape, generator=gen))
    return layer


def test_column_rows_take_each_shards_share_in_shard_order() -> None:
    # q | k | v of 4 query and 2 KV heads of 8: rank 1 keeps q heads 2-3 and KV head 1.
    assert column_rows([32, 16, 16], 1, 2) == [slice(16, 32), slice(40, 48), slice(56, 64)]
    assert column_rows([32, 16, 16], 0, 2) == [slice(0, 16), slice(32, 40), slice(48, 56)]
    # gate | up of 48 over 4 ranks
    assert column_rows([48, 48], 2, 4) == [slice(24, 36), slice(72, 84)]
    with pytest.raises(ValueError, match="48 rows"):
        column_rows([48], 0, 5)


@pytest.mark.parametrize("world", [2, 4])
def test_column_shards_concatenate_back_to_the_full_layer(world: int) -> None:
    full = random_linear([32, 16, 16], bias=True)  # Qwen2's qkv carries a bias
    x = torch.randn(5, 32)
    expected = full(x).split(full.shard_sizes, dim=-1)
    parts = [column_shard(full, rank, world) for rank in range(world)]
    assert parts[0].shard_sizes == [32 // world, 16 // world, 16 // world]
    outputs = [part(x).split(part.shard_sizes, dim=-1) for part in parts]
    for shard in range(3):
        rebuilt = torch.cat([out[shard] for out in outputs], dim=-1)
        torch.testing.assert_close(rebuilt, expected[shard], rtol=0, atol=0)


def test_row_shards_sum_to_the_full_layer_with_the_bias_once() -> None:
    full = random_linear([32], bias=True, in_features=48)
    x = torch.randn(5, 48)
    parts = [row_shard(full, rank, 2, None) for rank in range(2)]
    assert all(isinstance(p, RowParallel) and p.inner.bias is None for p in parts)
    partial = sum(p.inner(x[:, rank * 24 : (rank + 1) * 24]) for rank, p in enumerate(parts))
    assert isinstance(partial, torch.Tensor) and parts[0].bias is not None
    torch.testing.assert_close(partial + parts[0].bias, full(x), rtol=1e-5, atol=1e-5)


def test_grouped_fp8_shards_keep_their_column_groups() -> None:
    # A block-wise checkpoint's layer: scales per 8 input columns, row- and column-split.
    full = Fp8Linear.from_linear(random_linear([32, 16], bias=False, in_features=48), group_size=8)
    x = torch.randn(5, 48)
    parts = [row_shard(full, rank, 2, None) for rank in range(2)]
    assert all(isinstance(p.inner, Fp8Linear) and p.inner.group_size == 8 for p in parts)
    assert parts[1].inner.weight_scale.shape == (48, 3)
    torch.testing.assert_close(parts[1].inner.weight_scale, full.weight_scale[:, 3:])
    partial = sum(p.inner(x[:, rank * 24 : (rank + 1) * 24]) for rank, p in enumerate(parts))
    assert isinstance(partial, torch.Tensor)
    torch.testing.assert_close(partial, full(x), rtol=1e-5, atol=1e-5)
    columns = [column_shard(full, rank, 2) for rank in range(2)]
    assert isinstance(columns[0], Fp8Linear) and columns[0].weight_scale.shape == (24, 6)
    halves = [c(x).split(c.shard_sizes, dim=-1) for c in columns]
    rebuilt = torch.cat([halves[0][0], halves[1][0], halves[0][1], halves[1][1]], dim=-1)
    torch.testing.assert_close(rebuilt, full(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="whole groups of 8"):
        row_shard(full, 0, 4, None)  # 12 columns per rank


def test_divisibility_errors_name_both_numbers() -> None:
    with pytest.raises(ValueError, match=r"num_heads \(6\) .* tensor_parallel_size \(4\)"):
        check_tensor_parallel(arch(num_attention_heads=6, num_key_value_heads=2), 4)
    with pytest.raises(ValueError, match=r"num_kv_heads \(2\) .* tensor_parallel_size \(4\)"):
        check_tensor_parallel(arch(num_attention_heads=4, num_key_value_heads=2), 4)
    with pytest.raises(ValueError, match=r"num_kv_heads \(1\) .* tensor_parallel_size \(2\)"):
        check_tensor_parallel(arch(num_key_value_heads=1), 2)
    with pytest.raises(ValueError, match=r"intermediate_size \(48\) .* \(32\)"):
        check_tensor_parallel(arch(num_attention_heads=32, num_key_value_heads=32), 32)
    check_tensor_parallel(arch(), 2)
    assert (local_arch(arch(), 2).num_heads, local_arch(arch(), 2).num_kv_heads) == (2, 1)


def test_shard_model_keeps_local_heads_and_fp8_reaches_wrapped_layers() -> None:
    model = LlamaForCausalLM(arch(), torch.float32)
    shard_model(model, 1, 2, None)
    attn = model.model.layers[0].self_attn
    mlp = model.model.layers[0].mlp
    assert isinstance(attn, LlamaAttention) and isinstance(mlp, LlamaMLP)
    assert (attn.num_heads, attn.num_kv_heads) == (2, 1)
    assert attn.qkv_proj.shard_sizes == [16, 8, 8] and attn.qkv_proj.bias is not None
    assert isinstance(attn.o_proj, RowParallel) and attn.o_proj.inner.in_features == 16
    assert attn.o_proj.bias is None  # Qwen2: q/k/v bias only
    assert mlp.gate_up_proj.shard_sizes == [24, 24]
    assert isinstance(mlp.down_proj, RowParallel) and mlp.down_proj.inner.in_features == 24
    assert model.lm_head is not None and model.lm_head.weight.shape == (64, 32)  # replicated
    # The FP8 pass swaps FusedLinear by attribute, inside the wrappers too.
    assert quantize_model_fp8(model) == 4 * 2 + 1  # and the replicated lm_head
    assert isinstance(attn.o_proj, RowParallel) and isinstance(attn.o_proj.inner, Fp8Linear)
    assert isinstance(attn.qkv_proj, Fp8Linear) and attn.qkv_proj.shard_sizes == [16, 8, 8]


def test_group_quantized_layers_are_refused_with_a_clear_error() -> None:
    model = LlamaForCausalLM(arch(), torch.float32)
    attn = model.model.layers[0].self_attn
    qkv = attn.qkv_proj
    attn.qkv_proj = GroupQuantLinear(
        qkv.in_features, qkv.shard_sizes, bits=4, group_size=32, bias=True,
        dtype=torch.float32, device="cpu",
    )  # fmt: skip
    with pytest.raises(ValueError, match="--tensor-parallel-size 1"):
        shard_model(model, 0, 2, None)


def test_config_and_cli_carry_tensor_parallel_size() -> None:
    with pytest.raises(ValueError, match="tensor_parallel_size must be at least 1, got 0"):
        EngineConfig(model="m", tensor_parallel_size=0)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "m", "--tensor-parallel-size", "2"])
    assert engine_config_kwargs(args)["tensor_parallel_size"] == 2


def test_llm_refuses_an_indivisible_model_before_spawning(tmp_path: Path) -> None:
    checkpoint = make_checkpoint("mistral", tmp_path / "mistral")  # 4 heads over 1 KV head
    with pytest.raises(ValueError, match=r"num_kv_heads \(1\) .* tensor_parallel_size \(2\)"):
        LLM(str(checkpoint), tensor_parallel_size=2, progress=False)
    assert multiprocessing.active_children() == []
