"""GPTQ and AWQ checkpoints load into group-quantized layers as they are.

Tiny random Llamas are written here in each format's own layout (packed_writers.py): GPTQ
4- and 8-bit, groups of 32/64/128 and whole rows, act-order on and off, symmetric and
asymmetric zeros, v1 and v2 zero storage; AWQ GEMM. Each layer's conversion is checked
against the format's own dequantization, and the loaded model's logits against a float
model of those weights. Sizes of 80 and 200 columns leave partial groups and padded blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from inference.engine.engine_config import EngineConfig
from inference.kernels.cpu.layers import load_layer_kernels
from inference.model.layers.linear import FusedLinear
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.quant.group_linear import GroupQuantLinear
from inference.model.quant.group_math import dequantize, unpack_codes
from inference.model.quant.packed_format import convert_packed, read_packed_format
from tests.inference.model.paged import PagedDriver
from tests.inference.quant.packed_writers import (
    Spec,
    dequantize_exact,
    dequantize_rounded,
    quantization_config,
    write_packed_checkpoint,
)

# hidden 80 and intermediate 200 ("odd"): partial groups, padded blocks, head_dim 20.
SPECS = {
    "gptq4-g32-sym": Spec("gptq", 4, 32, sym=True),
    "gptq4-g32-act-odd": Spec("gptq", 4, 32, act_order=True, hidden=80, intermediate=200),
    "gptq4-g128-act-odd": Spec("gptq", 4, 128, act_order=True, hidden=80, intermediate=200),
    "gptq4-g64-act-v2": Spec("gptq", 4, 64, act_order=True, v2=True),
    "gptq4-row-act-sym": Spec("gptq", 4, -1, sym=True, act_order=True),
    "gptq8-g64-act-sym": Spec("gptq", 8, 64, sym=True, act_order=True),
    "gptq8-row-odd": Spec("gptq", 8, -1, hidden=80, intermediate=200),
    "awq-g32": Spec("awq", 4, 32),
    "awq-g64-odd": Spec("awq", 4, 64, hidden=80, intermediate=200),
    "awq-g128": Spec("awq", 4, 128),
}


def module_parts(path: Path, module: str) -> dict[str, torch.Tensor]:
    tensors = load_file(str(path / "model.safetensors"))
    return {n.rpartition(".")[2]: t for n, t in tensors.items() if n.startswith(module + ".")}


@pytest.mark.parametrize("case", list(SPECS))
def test_each_layer_converts_to_the_formats_own_dequantization(tmp_path: Path, case: str) -> None:
    spec = SPECS[case]
    read = write_packed_checkpoint(tmp_path, spec)
    fmt = read_packed_format(quantization_config(spec))
    assert fmt is not None
    worst = 0.0
    for module, parts in read.items():
        packed, perm = convert_packed(fmt, module_parts(tmp_path, module), module)
        assert packed.codes.dtype == torch.uint8 and packed.scale.dtype == torch.float16
        order = torch.arange(packed.cols) if perm is None else perm
        # Codes are the checkpoint's q, columns in the stored order; nothing else.
        q = torch.from_numpy(parts["q"]).T[:, order]
        assert torch.equal(unpack_codes(packed.codes, packed.bits, packed.cols).long(), q)
        weight = torch.empty(packed.shape).index_copy_(1, order, dequantize(packed))
        # Bit for bit what scale * q + float16(-scale * zero) gives in float32...
        torch.testing.assert_close(
            weight, torch.from_numpy(dequantize_rounded(parts)), rtol=0, atol=0
        )
        # ... which is the format's scale * (q - zero) up to float16's rounding of the offset.
        exact = torch.from_numpy(dequantize_exact(parts))
        g = torch.from_numpy(np.asarray(parts["g_idx"], dtype=np.int64))
        offset = torch.from_numpy(parts["scale"].astype(np.float32) * parts["zero"])[g].T
        error = (weight - exact).abs()
        assert bool((error <= offset.abs() * 2.0**-11 + 1e-7).all()), module
        if spec.sym:  # zero 8 or 128: a power of two, so exact
            assert torch.equal(weight, exact), module
        scale = torch.from_numpy(parts["scale"].astype(np.float32))[g].T
        worst = max(worst, float((error / scale).max()))
    print(f"{case}: max |ours - scale*(q-zero)| = {worst:.2e} of a step")


def reference_checkpoint(path: Path, read: dict[str, dict[str, np.ndarray]]) -> Path:
    """A float32 checkpoint of the format's weights, dequantized as our layout computes."""
    target = path / "reference"
    target.mkdir()
    tensors = load_file(str(path / "model.safetensors"))
    floats = {n: t for n, t in tensors.items() if n.rpartition(".")[0] not in read}
    for module, parts in read.items():
        weight = np.ascontiguousarray(dequantize_rounded(parts))
        floats[f"{module}.weight"] = torch.from_numpy(weight)
    save_file(floats, str(target / "model.safetensors"))
    (target / "config.json").write_text((path / "float" / "config.json").read_text())
    return target


def run_steps(model: LlamaForCausalLM) -> list[torch.Tensor]:
    """A prefill of two prompts (the dequantizing path), then decode steps (the kernel's)."""
    rng = np.random.default_rng(5)
    prompts = {0: rng.integers(3, 384, 23).tolist(), 1: rng.integers(3, 384, 5).tolist()}
    driver = PagedDriver(model, num_blocks=16)
    steps = [driver.step(prompts)]
    for offset in range(2):
        steps.append(driver.step({seq: [7 + offset + seq] for seq in prompts}))
    return steps


def assert_logits_close(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> None:
    for got, want in zip(ours, reference, strict=True):
        scale = want.abs().max().item()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4 * scale)


def check_layers(model: LlamaForCausalLM, spec: Spec, floats: tuple[str, ...] = ()) -> None:
    for name, module in model.named_modules():
        if not name.endswith(("qkv_proj", "o_proj", "gate_up_proj", "down_proj")):
            continue
        if name.rpartition(".")[2] in floats:
            assert type(module) is FusedLinear and module.weight.dtype == torch.float32, name
            continue
        assert isinstance(module, GroupQuantLinear), name
        assert module.weight.dtype == torch.uint8 and module.bits == spec.bits, name
        held = [*module.parameters(recurse=False), *module.buffers(recurse=False)]
        assert {t.dtype for t in held} <= {torch.uint8, torch.float16, torch.int64}, name
        if spec.act_order and 0 < spec.group_size < module.in_features:  # groups to shuffle
            assert module.input_perm is not None, name
        else:
            assert module.input_perm is None, name
    assert type(model.lm_head) is not GroupQuantLinear


@pytest.mark.parametrize("kernels", [False, True], ids=["torch", "cpu-kernels"])
@pytest.mark.parametrize("case", list(SPECS))
def test_loaded_logits_match_a_float_model_of_the_same_weights(
    tmp_path: Path, case: str, kernels: bool
) -> None:
    spec = SPECS[case]
    read = write_packed_checkpoint(tmp_path, spec)
    kept, _ = load_model(tmp_path, dtype="float32", progress=False)
    named, _ = load_model(tmp_path, dtype="float32", progress=False, quantization=spec.method)
    reference, _ = load_model(reference_checkpoint(tmp_path, read), dtype="float32", progress=False)
    check_layers(kept, spec)
    if kernels:
        layer_kernels = load_layer_kernels()  # `make test` installs the compiler they need
        assert layer_kernels is not None and layer_kernels.quant is not None
        for model in (kept, named, reference):
            model.set_layer_kernels(layer_kernels)
    expected = run_steps(reference)
    assert_logits_close(run_steps(kept), expected)
    assert_logits_close(run_steps(named), expected)


def test_fused_shards_with_different_column_orders_load_in_floats(tmp_path: Path) -> None:
    """k_proj quantized in an act-order of its own: q|k|v cannot share one input gather,
    so that layer is dequantized at load; the others stay quantized."""
    spec = Spec("gptq", 4, 32, act_order=True, own_perm="k_proj")
    read = write_packed_checkpoint(tmp_path, spec)
    kept, _ = load_model(tmp_path, dtype="float32", progress=False)
    check_layers(kept, spec, floats=("qkv_proj",))
    reference, _ = load_model(reference_checkpoint(tmp_path, read), dtype="float32", progress=False)
    assert_logits_close(run_steps(kept), run_steps(reference))


@pytest.fixture(scope="module")
def gptq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gptq")
    write_packed_checkpoint(path, Spec("gptq", 4, 32, act_order=True))
    return path


@pytest.mark.parametrize(
    ("quantization", "message"),
    [
        ("fp8", r"already quantized \(GPTQ 4-bit, groups of 32, act-order\); "
                "--quantization fp8 would have to dequantize"),
        ("awq", "holds GPTQ 4-bit.*--quantization awq does not apply"),
        ("gguf", "applies to .gguf files"),
    ],
)  # fmt: skip
def test_a_setting_that_does_not_fit_the_checkpoint_is_refused(
    gptq_dir: Path, quantization: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        load_model(gptq_dir, dtype="float32", progress=False, quantization=quantization)


def test_gptq_on_a_float_checkpoint_is_refused(gptq_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--quantization gptq loads a GPTQ checkpoint"):
        load_model(gptq_dir / "float", progress=False, quantization="gptq")
    declared = tmp_path / "declared"  # the declaration without the tensors
    declared.mkdir()
    (declared / "model.safetensors").symlink_to(gptq_dir / "float" / "model.safetensors")
    document = json.loads((gptq_dir / "config.json").read_text())
    (declared / "config.json").write_text(json.dumps(document))
    with pytest.raises(ValueError, match="declares GPTQ, but no tensor is a qweight"):
        load_model(declared, progress=False)


def rewrite_config(source: Path, target: Path, change: dict[str, object] | None) -> Path:
    target.mkdir()
    (target / "model.safetensors").symlink_to(source / "model.safetensors")
    document = json.loads((source / "config.json").read_text())
    if change is None:
        del document["quantization_config"]
    else:
        document["quantization_config"].update(change)
    (target / "config.json").write_text(json.dumps(document))
    return target


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bits": 3}, "3-bit weights is not supported"),
        ({"group_size": 16}, "group size 16 is not supported"),
        ({"group_size": 64}, "do not fit 2 groups"),  # the tensors say 32
        ({"checkpoint_format": "marlin"}, "format 'marlin' is not supported"),
        ({"quant_method": "awq", "version": "gemv"}, "AWQ version 'gemv' is not supported"),
        ({"lm_head": True}, "lm_head is not supported"),
        (None, "declares no quantization_config"),
    ],
)
def test_unsupported_variants_are_refused(
    gptq_dir: Path, tmp_path: Path, change: dict[str, object] | None, message: str
) -> None:
    path = rewrite_config(gptq_dir, tmp_path / "changed", change)
    with pytest.raises(ValueError, match=message):
        load_model(path, dtype="float32", progress=False)


def test_engine_config_takes_the_names() -> None:
    for name in ("gptq", "awq"):
        assert EngineConfig(model="dir", quantization=name).quantization == name
    with pytest.raises(ValueError, match="one rank"):
        EngineConfig(model="dir", quantization="gptq", tensor_parallel_size=2)
    with pytest.raises(ValueError, match="needs a AWQ checkpoint directory"):
        EngineConfig(model="model.gguf", quantization="awq")
