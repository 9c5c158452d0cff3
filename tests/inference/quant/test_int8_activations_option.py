"""`--int8-activations`: the engine option that lets group-quantized layers multiply int8
activations at decode steps, and `bench int8-accuracy`, which measures what it moves."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch

from inference import LLM, SamplingParams
from inference.__main__ import main
from inference.bench.fp8_accuracy import prefill_logits
from inference.bench.int8_accuracy import chunked_logits
from inference.bench.requantize_gguf import main as requantize_main
from inference.engine.engine_config import EngineConfig
from inference.kernels.cpu.layers import load_layer_kernels
from inference.model.loader import load_model
from inference.model.quant.group_apply import use_int8_activations
from inference.model.quant.group_linear import GroupQuantWeights
from inference.server.cli import add_arguments, engine_config_kwargs
from tests.inference.checkpoints import make_checkpoint
from tests.inference.model.test_gguf_files import _write_model

TEXT = "hello world, the world is hell or hello. " * 12


@pytest.fixture(scope="module")
def q8_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama GGUF whose every matrix is Q8_0 (kept as group-quantized layers)."""
    folder = tmp_path_factory.mktemp("int8")
    _write_model(folder / "f32.gguf")
    assert requantize_main([str(folder / "f32.gguf"), str(folder / "q8.gguf")]) == 0
    return folder / "q8.gguf"


def group_layers(model: torch.nn.Module) -> list[GroupQuantWeights]:
    return [m for m in model.modules() if isinstance(m, GroupQuantWeights)]


def test_config_refuses_what_cannot_take_int8_activations() -> None:
    with pytest.raises(ValueError, match="FP8 weights have their own kernel"):
        EngineConfig(model="dir", quantization="fp8", int8_activations=True)
    with pytest.raises(ValueError, match="needs quantization 'gguf'"):
        EngineConfig(model="model.gguf", int8_activations=True)
    with pytest.raises(ValueError, match="on CUDA"):
        EngineConfig(model="m.gguf", quantization="gguf", device="cuda", int8_activations=True)
    with pytest.raises(ValueError, match="one rank"):
        EngineConfig(model="gptq-dir", tensor_parallel_size=2, int8_activations=True)
    assert EngineConfig(model="m.gguf", quantization="gguf", int8_activations=True)


def test_engine_sets_every_group_layer_and_generates(q8_file: Path) -> None:
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    with LLM(str(q8_file), quantization="gguf", dtype="float32", int8_activations=True,
             progress=False) as llm:  # fmt: skip
        layers = group_layers(llm.engine.runner.model)
        assert layers and all(layer.int8_activations for layer in layers)
        (output,) = llm.generate([TEXT[:40]], params)
    assert len(output.outputs[0].token_ids) == 8
    with LLM(str(q8_file), quantization="gguf", dtype="float32", progress=False) as llm:
        assert not any(layer.int8_activations for layer in group_layers(llm.engine.runner.model))


def test_engine_refuses_a_model_without_group_quantized_layers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="this model has none"):
        LLM(make_checkpoint("llama", tmp_path), dtype="float32", int8_activations=True,
            progress=False)  # fmt: skip


def test_int8_activations_only_on_the_cpu(q8_file: Path) -> None:
    model, _ = load_model(q8_file, dtype="float32", progress=False, quantization="gguf")
    with pytest.raises(ValueError, match="CPU kernels, not on cuda"):
        use_int8_activations(model, torch.device("cuda"))
    assert not any(layer.int8_activations for layer in group_layers(model))
    assert use_int8_activations(model, torch.device("cpu")) == len(group_layers(model))


def test_cli_option_reaches_the_engine_config() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["--model", "m.gguf", "--quantization", "gguf"]
    assert engine_config_kwargs(parser.parse_args(base))["int8_activations"] is False
    kwargs = engine_config_kwargs(parser.parse_args([*base, "--int8-activations"]))
    assert kwargs["int8_activations"] is True
    assert EngineConfig(**kwargs).int8_activations


def test_chunked_logits_are_the_whole_prefill(q8_file: Path) -> None:
    """Fed a few tokens at a time, each chunk attending to the earlier ones, the model gives
    the logits of one whole prefill (the kernel against the dequantized weight: float32
    rounding apart)."""
    model, _ = load_model(q8_file, dtype="float32", progress=False, quantization="gguf")
    model.set_layer_kernels(load_layer_kernels())
    tokens = [(7 * i) % 200 + 3 for i in range(40)]
    whole = prefill_logits(model, tokens)
    for chunk in (1, 5, 8):
        difference = (chunked_logits(model, tokens, chunk) - whole).abs().max().item()
        assert difference < 1e-3 * whole.abs().max().item(), (chunk, difference)


def test_int8_accuracy_bench_reports_each_row(
    q8_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, out = tmp_path / "text.txt", tmp_path / "out.json"
    text.write_text(TEXT, encoding="utf-8")
    argv = ["bench", "int8-accuracy", "--model", str(q8_file), "--quantization", "gguf",
            "--text", str(text), "--tokens", "96", "--output", str(out)]  # fmt: skip
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == result
    rows = result["rows"]
    assert list(rows) == [
        "int8 activations (float32 elsewhere)",
        "bf16 activations",
        "int8 activations (bf16 elsewhere)",
        "int8 served vs bf16 served",
    ]
    int8 = rows["int8 activations (float32 elsewhere)"]["text.txt"]
    # A different arithmetic (the KL is not zero), but close to the exact kernel's.
    assert 0 < int8["kl_mean"] < 0.05 and int8["top1_agreement"] >= 0.8


def test_int8_accuracy_bench_refuses_bad_input(
    q8_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["bench", "int8-accuracy", "--model", str(q8_file)]
    assert main([*base, "--quantization", "gguf", "--chunk", "16"]) == 2
    assert "--chunk must be in [1, 15]" in capsys.readouterr().err
    assert main(base) == 2
    assert "needs --quantization gguf" in capsys.readouterr().err
    assert main([*base, "--quantization", "gguf", "--tokens", "100000"]) == 2
    assert "--tokens asks for 100000" in capsys.readouterr().err
