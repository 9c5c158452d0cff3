"""Pre-quantized FP8 checkpoints (compressed-tensors layout) load as FP8 and compute right.

A tiny random Llama from transformers is quantized here the way llm-compressor writes it:
e4m3 weights, per-tensor scales for q/k/v (each its own), per-channel ones elsewhere,
static input scales on the MLP and KV cache scales on one layer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from inference.model.loader import checkpoint_kv_scales, load_model
from inference.model.quant import Fp8Linear
from inference.model.quant.fp8 import FP8_DTYPE, FP8_MAX
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.paged import PagedDriver

PER_TENSOR = ("q_proj", "k_proj", "v_proj")
STATIC_INPUT = ("gate_proj", "up_proj")
COMPRESSED_TENSORS = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel"},
            "input_activations": {"num_bits": 8, "type": "float", "dynamic": True},
        }
    },
    "ignore": ["lm_head"],
}


def quantize_file(source: Path, target: Path, config_extra: dict[str, object]) -> dict:
    """Write `target`: source's checkpoint in FP8; return the float32 dequantized tensors."""
    tensors = load_file(str(source / "model.safetensors"))
    out: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, tensor in tensors.items():
        module = name.removesuffix(".weight")
        kind = module.rpartition(".")[2]
        if ".layers." not in name or not name.endswith("_proj.weight"):
            out[name] = dequantized[name] = tensor
            continue
        if kind in PER_TENSOR:
            scale = tensor.abs().amax() / FP8_MAX  # a scalar
            q = (tensor / scale).to(FP8_DTYPE)
            back = q.float() * scale
        else:
            scale = tensor.abs().amax(dim=1, keepdim=True) / FP8_MAX  # (out, 1)
            q = (tensor / scale).to(FP8_DTYPE)
            back = q.float() * scale
            if kind == "o_proj":
                scale = scale[:, 0]  # (out,): both per-channel shapes occur in the wild
        out[name], out[f"{module}.weight_scale"] = q, scale.float()
        if kind in STATIC_INPUT:
            out[f"{module}.input_scale"] = torch.tensor([0.02 if kind == "gate_proj" else 0.03])
        dequantized[name] = back
    out["model.layers.1.self_attn.k_scale"] = torch.tensor(0.5)
    out["model.layers.1.self_attn.v_scale"] = torch.tensor(0.25)
    target.mkdir()
    save_file(out, str(target / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    config.update(config_extra)
    (target / "config.json").write_text(json.dumps(config))
    return dequantized


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("fp8")
    source = make_checkpoint("llama", root / "source")
    declared = root / "declared"
    dequantized = quantize_file(source, declared, {"quantization_config": COMPRESSED_TENSORS})
    undeclared = root / "undeclared"
    quantize_file(source, undeclared, {})
    reference = root / "reference"
    reference.mkdir()
    save_file(dequantized, str(reference / "model.safetensors"))
    (reference / "config.json").write_text((source / "config.json").read_text())
    return declared, undeclared, reference


def test_fp8_checkpoint_loads_as_fp8_without_dequantizing(
    checkpoints: tuple[Path, Path, Path],
) -> None:
    declared, _, _ = checkpoints
    model, config = load_model(declared, dtype="float32", progress=False)
    stored = load_file(str(declared / "model.safetensors"))
    attn = model.model.layers[0].self_attn
    mlp = model.model.layers[0].mlp
    assert all(isinstance(m, Fp8Linear) for m in (attn.qkv_proj, attn.o_proj, mlp.down_proj))
    assert model.lm_head is not None and model.lm_head.weight.dtype == torch.float32
    prefix = "model.layers.0.self_attn"
    # The e4m3 bytes are the file's; q|k|v's three scalar scales became one vector.
    expected = torch.cat([stored[f"{prefix}.{k}.weight"].view(torch.uint8) for k in PER_TENSOR])
    assert torch.equal(attn.qkv_proj.weight.view(torch.uint8), expected)
    scales = [stored[f"{prefix}.{k}.weight_scale"] for k in PER_TENSOR]
    assert len({float(s) for s in scales}) == 3
    sizes = attn.qkv_proj.shard_sizes
    expected_scale = torch.cat([s.expand(n) for s, n in zip(scales, sizes, strict=True)])
    assert torch.equal(attn.qkv_proj.weight_scale, expected_scale)
    # Fused gate|up share one static activation scale: the larger.
    assert mlp.gate_up_proj.input_scale is not None
    assert float(mlp.gate_up_proj.input_scale) == pytest.approx(0.03)
    assert attn.qkv_proj.input_scale is None
    assert checkpoint_kv_scales(model) == [(1.0, 1.0), (0.5, 0.25)]
    assert config.num_layers == 2


def test_fp8_checkpoint_logits_match_its_dequantized_weights(
    checkpoints: tuple[Path, Path, Path],
) -> None:
    declared, undeclared, reference = checkpoints
    tokens = torch.randint(3, 384, (37,), generator=torch.Generator().manual_seed(1)).tolist()
    expected_model, _ = load_model(reference, dtype="float32", progress=False)
    expected = PagedDriver(expected_model).step({0: tokens})
    for path in (declared, undeclared):  # found from config.json, or from the tensors alone
        model, _ = load_model(path, dtype="float32", progress=False)
        assert isinstance(model.model.layers[1].mlp.gate_up_proj, Fp8Linear)
        torch.testing.assert_close(PagedDriver(model).step({0: tokens}), expected)


def quantize_blockwise(source: Path, target: Path, block: tuple[int, int]) -> dict:
    """`target`: source's checkpoint with block-wise e4m3 weights and DeepSeek's names
    (``weight_scale_inv``, ``weight_block_size``); return the float32 dequantized tensors."""
    rows, cols = block
    out: dict[str, torch.Tensor] = {}
    dequantized: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(str(source / "model.safetensors")).items():
        if ".layers." not in name or not name.endswith("_proj.weight"):
            out[name] = dequantized[name] = tensor
            continue
        n, k = tensor.shape
        nb, kb = -(-n // rows), -(-k // cols)
        padded = torch.nn.functional.pad(tensor, (0, kb * cols - k, 0, nb * rows - n))
        blocks = padded.view(nb, rows, kb, cols)
        scale = blocks.abs().amax(dim=(1, 3)) / FP8_MAX  # (nb, kb)
        full = scale.repeat_interleave(rows, 0).repeat_interleave(cols, 1)[:n, :k]
        q = (tensor / full).to(FP8_DTYPE)
        out[name], out[name.removesuffix("weight") + "weight_scale_inv"] = q, scale
        dequantized[name] = q.float() * full
    target.mkdir()
    save_file(out, str(target / "model.safetensors"))
    config = json.loads((source / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": list(block),
    }
    (target / "config.json").write_text(json.dumps(config))
    return dequantized


@pytest.mark.parametrize("block", [(16, 16), (24, 48)])  # whole blocks; partial ones
def test_blockwise_fp8_checkpoint_loads_grouped_and_matches_its_dequantized_weights(
    tmp_path: Path, block: tuple[int, int]
) -> None:
    source = make_checkpoint("llama", tmp_path / "source")
    dequantized = quantize_blockwise(source, tmp_path / "blocks", block)
    reference = tmp_path / "reference"
    reference.mkdir()
    save_file(dequantized, str(reference / "model.safetensors"))
    (reference / "config.json").write_text((source / "config.json").read_text())
    model, _ = load_model(tmp_path / "blocks", dtype="float32", progress=False)
    qkv = model.model.layers[0].self_attn.qkv_proj
    assert isinstance(qkv, Fp8Linear) and qkv.group_size == block[1]
    assert qkv.weight_scale.shape == (qkv.out_features, -(-qkv.in_features // block[1]))
    tokens = torch.randint(3, 384, (29,), generator=torch.Generator().manual_seed(2)).tolist()
    expected_model, _ = load_model(reference, dtype="float32", progress=False)
    expected = PagedDriver(expected_model).step({0: tokens})
    torch.testing.assert_close(PagedDriver(model).step({0: tokens}), expected)


@pytest.mark.parametrize(
    ("quantization_config", "message"),
    [
        ({"quant_method": "bitsandbytes", "bits": 4}, "'bitsandbytes' is not supported"),
        ({"quant_method": "fp8", "weight_block_size": [128]}, "two positive integers"),
        (
            {
                **COMPRESSED_TENSORS,
                "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}},
            },
            "4-bit int weights are not supported",
        ),
    ],
)
def test_unsupported_quantization_is_a_value_error(
    checkpoints: tuple[Path, Path, Path],
    tmp_path: Path,
    quantization_config: dict[str, object],
    message: str,
) -> None:
    declared, _, _ = checkpoints
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "model.safetensors").symlink_to(declared / "model.safetensors")
    config = json.loads((declared / "config.json").read_text())
    (bad / "config.json").write_text(
        json.dumps({**config, "quantization_config": quantization_config})
    )
    with pytest.raises(ValueError, match=message):
        load_model(bad, progress=False)
