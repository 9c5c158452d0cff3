"""GPTQ and AWQ checkpoints whose format is in quantize_config.json / quant_config.json.

Each tiny checkpoint is written once in the format's layout (packed_writers.py) with
config.json's quantization_config; a second directory holds the same tensors with the
format only in the legacy file older AutoGPTQ / GPTQModel / AutoAWQ save. Both must load
to the same model (identical logits), and what cannot load is refused by name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from inference.__main__ import main
from inference.model.loader import load_model
from inference.model.loader.hf import read_config
from inference.model.loader.safetensors import read_header
from tests.inference.quant.packed_writers import Spec, write_packed_checkpoint
from tests.inference.quant.test_gptq_awq import check_layers, run_steps


def autogptq_file(spec: Spec, **change: object) -> dict[str, object]:
    """quantize_config.json as AutoGPTQ 0.4 saved it (no quant_method, no format)."""
    document: dict[str, object] = {
        "bits": spec.bits, "group_size": spec.group_size, "damp_percent": 0.01,
        "desc_act": spec.act_order, "static_groups": False, "sym": spec.sym,
        "true_sequential": True, "model_name_or_path": None, "model_file_base_name": None,
    }  # fmt: skip
    document.update(change)
    return document


def autoawq_file(spec: Spec, **change: object) -> dict[str, object]:
    """quant_config.json as older AutoAWQ saved it."""
    document: dict[str, object] = {
        "zero_point": True, "q_group_size": spec.group_size, "w_bit": spec.bits, "version": "GEMM",
    }  # fmt: skip
    document.update(change)
    return document


def legacy_checkpoint(
    source: Path,
    target: Path,
    files: dict[str, object],
    weights: str = "model.safetensors",
    keep_declared: bool = False,
) -> Path:
    """``source``'s tensors (as ``weights``) with the format in ``files`` (name -> JSON
    document, or a string written as it is); config.json loses its quantization_config
    unless ``keep_declared``."""
    target.mkdir()
    (target / weights).symlink_to(source / "model.safetensors")
    config = json.loads((source / "config.json").read_text())
    if not keep_declared:
        del config["quantization_config"]
    (target / "config.json").write_text(json.dumps(config))
    for name, document in files.items():
        text = document if isinstance(document, str) else json.dumps(document)
        (target / name).write_text(text)
    return target


GPTQ_V2 = Spec("gptq", 4, 64, act_order=True, v2=True)
GPTQ_8BIT = Spec("gptq", 8, -1, sym=True, hidden=80, intermediate=200)
ACT_ORDER = Spec("gptq", 4, 32, act_order=True)
AWQ = Spec("awq", 4, 64, hidden=80, intermediate=200)
# case -> (spec, legacy files, the weights' file name, the quantization_config read back)
CASES: dict[str, tuple[Spec, dict[str, Any], str, dict[str, object]]] = {
    "autogptq-0.4": (
        ACT_ORDER, {"quantize_config.json": autogptq_file(ACT_ORDER)},
        "gptq_model-4bit-32g.safetensors",  # AutoGPTQ's name when model_file_base_name is null
        {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": True},
    ),
    "autogptq-0.7-v2": (
        GPTQ_V2, {"quantize_config.json": autogptq_file(
            GPTQ_V2, quant_method="gptq", checkpoint_format="gptq_v2", model_file_base_name="model"
        )},
        "model.safetensors",
        {"quant_method": "gptq", "group_size": 64, "checkpoint_format": "gptq_v2"},
    ),
    "gptqmodel-8bit-named-file": (
        GPTQ_8BIT, {"quantize_config.json": autogptq_file(
            GPTQ_8BIT, quant_method="gptq", format="gptq", pack_dtype="int32",
            model_file_base_name="llama-8bit",
        )},
        "llama-8bit.safetensors",
        {"quant_method": "gptq", "bits": 8, "group_size": -1, "checkpoint_format": "gptq"},
    ),
    "gptq-in-quant_config.json": (  # AutoGPTQ reads this name too: the fields say GPTQ
        ACT_ORDER, {"quant_config.json": {
            "w_bit": 4, "q_group_size": 32, "desc_act": True, "sym": False,
        }},
        "model.safetensors",
        {"quant_method": "gptq", "bits": 4, "group_size": 32},
    ),
    "autoawq-gemm": (
        AWQ, {"quant_config.json": autoawq_file(AWQ)},
        "model.safetensors",
        {"quant_method": "awq", "bits": 4, "group_size": 64, "version": "GEMM"},
    ),
    "both-files-agreeing": (
        ACT_ORDER, {"quantize_config.json": autogptq_file(ACT_ORDER),
                    "quant_config.json": {"w_bit": 4, "q_group_size": 32, "desc_act": True}},
        "gptq_model-4bit-32g.safetensors",
        {"quant_method": "gptq", "bits": 4, "group_size": 32},
    ),
}  # fmt: skip


def assert_same_logits(ours: list[torch.Tensor], reference: list[torch.Tensor]) -> None:
    for got, want in zip(ours, reference, strict=True):
        assert torch.equal(got, want)


@pytest.mark.parametrize("case", list(CASES))
def test_the_legacy_file_loads_as_config_json_would(tmp_path: Path, case: str) -> None:
    spec, files, weights, expected = CASES[case]
    write_packed_checkpoint(tmp_path / "declared", spec)
    legacy = legacy_checkpoint(tmp_path / "declared", tmp_path / "legacy", files, weights)
    read = read_config(legacy)["quantization_config"]
    assert {key: read.get(key) for key in expected} == expected
    declared, _ = load_model(tmp_path / "declared", dtype="float32", progress=False)
    kept, _ = load_model(legacy, dtype="float32", progress=False)
    named, _ = load_model(legacy, dtype="float32", progress=False, quantization=spec.method)
    check_layers(kept, spec)
    expected_logits = run_steps(declared)
    assert_same_logits(run_steps(kept), expected_logits)
    assert_same_logits(run_steps(named), expected_logits)


def test_an_agreeing_legacy_file_beside_quantization_config_loads(tmp_path: Path) -> None:
    write_packed_checkpoint(tmp_path / "declared", ACT_ORDER)
    files = {"quantize_config.json": autogptq_file(ACT_ORDER, model_file_base_name="named")}
    both = legacy_checkpoint(
        tmp_path / "declared", tmp_path / "both", files, "named.safetensors", keep_declared=True
    )
    declared, _ = load_model(tmp_path / "declared", dtype="float32", progress=False)
    kept, _ = load_model(both, dtype="float32", progress=False)
    assert_same_logits(run_steps(kept), run_steps(declared))


def test_weights_sharded_under_the_base_name_load(tmp_path: Path) -> None:
    write_packed_checkpoint(tmp_path / "declared", ACT_ORDER)
    files = {"quantize_config.json": autogptq_file(ACT_ORDER, model_file_base_name="named")}
    legacy = legacy_checkpoint(
        tmp_path / "declared", tmp_path / "legacy", files, "shard.safetensors"
    )
    names = read_header(legacy / "shard.safetensors")
    index = {"weight_map": dict.fromkeys(names, "shard.safetensors")}
    (legacy / "named.safetensors.index.json").write_text(json.dumps(index))
    declared, _ = load_model(tmp_path / "declared", dtype="float32", progress=False)
    kept, _ = load_model(legacy, dtype="float32", progress=False)
    assert_same_logits(run_steps(kept), run_steps(declared))


def test_weights_under_no_name_it_tries_are_refused(tmp_path: Path) -> None:
    write_packed_checkpoint(tmp_path / "declared", ACT_ORDER)
    files = {"quantize_config.json": autogptq_file(ACT_ORDER)}
    legacy = legacy_checkpoint(
        tmp_path / "declared", tmp_path / "legacy", files, "other.safetensors"
    )
    message = r"nor gptq_model-4bit-32g\.safetensors\[\.index\.json\]"
    with pytest.raises(ValueError, match=message):
        load_model(legacy, dtype="float32", progress=False)


@pytest.fixture(scope="module")
def gptq_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gptq")
    write_packed_checkpoint(path, ACT_ORDER)
    return path


GPTQ_FILE = "quantize_config.json"
AWQ_FILE = "quant_config.json"


@pytest.mark.parametrize(
    ("name", "document", "message"),
    [
        (GPTQ_FILE, autogptq_file(ACT_ORDER, checkpoint_format="marlin"),
         "quantize_config.json: GPTQ checkpoint format 'marlin' is not supported"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, is_marlin_format=True),
         "quantize_config.json: GPTQ checkpoint format 'marlin' is not supported"),
        (AWQ_FILE, autoawq_file(AWQ, version="GEMV"),
         "quant_config.json: AWQ version 'gemv' is not supported; only 'gemm'"),
        (AWQ_FILE, autoawq_file(AWQ, w_bit=8), "AWQ checkpoint with 8-bit weights .* only 4-bit"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, bits=3),
         "quantize_config.json: GPTQ checkpoint with 3-bit weights is not supported"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, bits=2), "2-bit weights is not supported"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, bits="four"), "bits must be an integer .* 'four'"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, bits=[4]), r"bits must be an integer .* \[4\]"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, bits=True), "bits must be an integer .* True"),
        (AWQ_FILE, autoawq_file(AWQ, w_bit=None), "bits must be an integer .* None"),
        (GPTQ_FILE, {"group_size": 128}, "quantize_config.json gives no bits"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, group_size=-5),
         "group_size must be a positive integer or -1 .* got -5"),
        (AWQ_FILE, autoawq_file(AWQ, q_group_size=[128]), r"group_size must be .* \[128\]"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, group_size=48), "group size 48 is not supported"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, desc_act="yes"), "desc_act must be true or false"),
        (AWQ_FILE, autoawq_file(AWQ, zero_point=[True]), "zero_point must be true or false"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, checkpoint_format=["gptq"]),
         "checkpoint_format must be a string"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, quant_method="fp8"),
         "quant_method 'fp8' is not GPTQ or AWQ"),
        (GPTQ_FILE, autogptq_file(ACT_ORDER, model_file_base_name="../elsewhere"),
         "model_file_base_name '../elsewhere' must be a plain file name"),
        (GPTQ_FILE, "[4, 32]", "quantize_config.json must hold a JSON object"),
        (AWQ_FILE, '{"w_bit": 4,', "cannot read .*quant_config.json"),
    ],
)  # fmt: skip
def test_what_cannot_load_is_refused_by_name(
    gptq_dir: Path, tmp_path: Path, name: str, document: object, message: str
) -> None:
    path = legacy_checkpoint(gptq_dir, tmp_path / "legacy", {name: document})
    with pytest.raises(ValueError, match=message):
        load_model(path, dtype="float32", progress=False)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({GPTQ_FILE: autogptq_file(ACT_ORDER, bits=8)},
         "quantize_config.json says bits 8 but config.json's quantization_config says 4"),
        ({GPTQ_FILE: autogptq_file(ACT_ORDER, group_size=128)},
         "quantize_config.json says group_size 128 but config.json's .* says 32"),
        ({GPTQ_FILE: autogptq_file(ACT_ORDER, desc_act=False)},
         "quantize_config.json says desc_act False but .* says True"),
        ({GPTQ_FILE: autogptq_file(ACT_ORDER, checkpoint_format="gptq_v2")},
         "says checkpoint_format 'gptq_v2' but .* says 'gptq'"),
        ({AWQ_FILE: autoawq_file(ACT_ORDER)},
         "quant_config.json says quant_method 'awq' but .* says 'gptq'"),
    ],
)  # fmt: skip
def test_a_legacy_file_that_disagrees_with_quantization_config_is_refused(
    gptq_dir: Path, tmp_path: Path, files: dict[str, object], message: str
) -> None:
    path = legacy_checkpoint(gptq_dir, tmp_path / "both", files, keep_declared=True)
    with pytest.raises(ValueError, match=message + r".*disagree"):
        load_model(path, dtype="float32", progress=False)


def test_two_legacy_files_that_disagree_are_refused(gptq_dir: Path, tmp_path: Path) -> None:
    gptq_fields = {"w_bit": 4, "q_group_size": 64, "sym": False}  # "sym": GPTQ's
    files = {GPTQ_FILE: autogptq_file(ACT_ORDER), AWQ_FILE: gptq_fields}
    path = legacy_checkpoint(gptq_dir, tmp_path / "legacy", files)
    message = r"quant_config\.json says group_size 64 but quantize_config\.json says 32"
    with pytest.raises(ValueError, match=message):
        load_model(path, dtype="float32", progress=False)


@pytest.mark.parametrize(
    ("quantization", "message"),
    [
        ("fp8", r"already quantized \(GPTQ 4-bit, groups of 32, act-order\); "
                "--quantization fp8 would have to dequantize"),
        ("awq", r"holds GPTQ 4-bit, groups of 32, act-order; --quantization awq does not apply"),
    ],
)  # fmt: skip
def test_a_quantization_setting_that_does_not_fit_is_refused(
    gptq_dir: Path, tmp_path: Path, quantization: str, message: str
) -> None:
    files = {GPTQ_FILE: autogptq_file(ACT_ORDER)}
    path = legacy_checkpoint(gptq_dir, tmp_path / "legacy", files)
    with pytest.raises(ValueError, match=message):
        load_model(path, dtype="float32", progress=False, quantization=quantization)


def test_the_command_line_reports_the_refusal(
    gptq_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = legacy_checkpoint(gptq_dir, tmp_path / "legacy", {GPTQ_FILE: autogptq_file(ACT_ORDER)})
    assert main(["bench", "int8-accuracy", "--model", str(path), "--quantization", "awq"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("python -m inference: error: ")
    assert "holds GPTQ 4-bit, groups of 32, act-order; --quantization awq does not apply" in error
    marlin = legacy_checkpoint(
        gptq_dir, tmp_path / "marlin", {GPTQ_FILE: autogptq_file(ACT_ORDER, is_marlin_format=True)}
    )
    assert main(["bench", "int8-accuracy", "--model", str(marlin)]) == 2
    assert "GPTQ checkpoint format 'marlin' is not supported" in capsys.readouterr().err
