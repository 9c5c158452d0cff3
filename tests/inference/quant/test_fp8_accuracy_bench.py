"""`python -m inference bench fp8-accuracy` on a tiny random checkpoint: its JSON, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from inference.__main__ import main
from inference.bench.fp8_accuracy import compare
from inference.model.quant.fp8_math import quantize_weight_fp8
from tests.inference.checkpoints import CORPUS, make_checkpoint

ROWS = [
    "float32 weights",
    "bf16 arithmetic",
    "fp8 decoder only",
    "fp8",
    "fp8 kv",
    "fp8 weights and kv",
    "fp8 served vs bf16 served",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("fp8-accuracy"))


def test_reports_every_row_per_text(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text(CORPUS, encoding="utf-8")
    out = tmp_path / "result.json"
    args = ["bench", "fp8-accuracy", "--model", str(checkpoint), "--text", str(text)]
    assert main([*args, "--tokens", "48", "--output", str(out)]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(out.read_text())
    assert result["texts"] == ["corpus.txt"] and result["tokens_per_text"] == 48
    assert isinstance(result["cpu"], str) and result["cpu"]  # what the numbers were taken on
    rows = result["rows"]
    assert list(rows) == ROWS
    for row in ROWS:
        metrics = rows[row]["corpus.txt"]
        assert 0 <= metrics["top1_agreement"] <= 1
        assert metrics["kl_mean"] >= 0
        assert metrics["flips"] == round((1 - metrics["top1_agreement"]) * 48)
    # e4m3 keeps 3 mantissa bits, bf16 rounding 8: the FP8 rows move the logits more.
    kl = {row: rows[row]["corpus.txt"]["kl_mean"] for row in ROWS}
    assert kl["fp8"] > kl["float32 weights"] and kl["fp8 kv"] > kl["float32 weights"]
    assert kl["fp8 weights and kv"] != kl["fp8"]  # the pools' rounding reaches the logits


def test_compare_counts_flips_and_confident_positions() -> None:
    reference = torch.tensor([[2.0, 0.0, 0.0], [1.0, 0.9, 0.0], [0.0, 0.0, 3.0]])
    other = torch.tensor([[2.0, 0.0, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 3.0]])
    metrics = compare(reference, other)
    assert metrics["flips"] == 1 and metrics["top1_agreement"] == pytest.approx(2 / 3, abs=1e-4)
    assert metrics["flips_median_margin_nats"] == pytest.approx(0.1, abs=1e-3)
    # Rows 0 and 2 lead by 2 and 3 nats; row 1 by 0.1: two confident positions, both agree.
    assert metrics["confident_share"] == pytest.approx(2 / 3, abs=1e-4)
    assert metrics["top1_agreement_confident"] == 1.0
    assert compare(reference, reference)["kl_mean"] == 0


def test_bad_input_is_a_clear_error(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    short = tmp_path / "short.txt"
    short.write_text("a few words", encoding="utf-8")
    base = ["bench", "fp8-accuracy", "--model", str(checkpoint)]
    assert main([*base, "--text", str(short), "--tokens", "64"]) == 2
    assert "short.txt has" in capsys.readouterr().err
    assert main([*base, "--text", str(tmp_path / "missing.txt")]) == 2
    assert "no text file" in capsys.readouterr().err
    assert main(["bench", "fp8-accuracy", "--model", str(tmp_path / "nowhere")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_refuses_an_fp8_checkpoint(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file, save_file

    fp8_dir = tmp_path / "fp8"
    fp8_dir.mkdir()
    for file in checkpoint.iterdir():
        if file.suffix != ".safetensors":
            (fp8_dir / file.name).write_bytes(file.read_bytes())
    tensors = load_file(next(checkpoint.glob("*.safetensors")))
    name = "model.layers.0.mlp.down_proj.weight"
    tensors[name], scale = quantize_weight_fp8(tensors[name])
    tensors[name.replace("weight", "weight_scale")] = scale
    save_file(tensors, str(fp8_dir / "model.safetensors"))
    assert main(["bench", "fp8-accuracy", "--model", str(fp8_dir)]) == 2
    assert "already FP8" in capsys.readouterr().err
