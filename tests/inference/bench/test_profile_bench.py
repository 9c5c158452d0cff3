"""`python -m inference bench profile` on a tiny random checkpoint: its JSON, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.__main__ import main
from inference.bench.probe import probe
from inference.bench.profile import PHASES
from tests.inference.checkpoints import make_checkpoint
from tests.inference.engine.test_cpu_graphs import write_q4_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("profile"))


def bench(checkpoint: Path, *extra: str) -> list[str]:
    return [
        *("bench", "profile", "--model", str(checkpoint), "--dtype", "float32"),
        *("--batch", "4", "--steps", "3", "--prompt-len", "8", "--prefill-tokens", "24", *extra),
    ]


def test_splits_each_scenario_and_names_its_bound(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "profile.json"
    assert main(bench(checkpoint, "--output", str(out), "--top", "50")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(out.read_text())
    assert result["benchmark"] == "profile" and result["cpu"]
    machine = result["machine"]
    assert machine["read_gb_s"] > 0 and machine["matmul_tflops"]["float32"] > 0
    names = [s["scenario"] for s in result["scenarios"]]
    assert names == ["decode, batch 1", "decode, batch 4", "prefill, 24 tokens"]
    assert [s["tokens_per_step"] for s in result["scenarios"]] == [1, 4, 24]
    for scenario in result["scenarios"]:
        phases = scenario["phases_ms"]
        assert list(phases) == list(PHASES)
        assert phases["forward"] > 0 and phases["logits"] > 0 and phases["sample"] > 0
        # The phases split the instrumented steps: their sum is the steps' mean time.
        assert sum(phases.values()) == pytest.approx(
            scenario["step_ms_instrumented_mean"], rel=0.02, abs=0.02
        )
        modules = scenario["modules_ms"]
        # Every layer's projections, summed under one name; exclusive times fit the forward.
        assert {"model.layers.*.mlp.down_proj", "model.layers.*.self_attn.qkv_proj"} <= set(modules)
        assert sum(modules.values()) <= phases["forward"] + phases["logits"] + 0.05
        bound = scenario["bound_ms"]
        assert bound["bound"] in ("bandwidth", "compute") and bound["step_over_bound"] > 0
    # The same weights are read at every step; only the compute grows with the tokens.
    reads = {s["bound_ms"]["weights_read_ms"] for s in result["scenarios"]}
    assert len(reads) == 1
    matmul = [s["bound_ms"]["matmul_ms"] for s in result["scenarios"]]
    assert matmul[0] < matmul[1] < matmul[2]


def test_a_replayed_decode_is_timed_as_served_and_split_eagerly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kept-quantized model's decode steps replay a CPU decode graph: step_ms times them
    so, and the split (hooks on the modules) comes from eager steps."""
    model = write_q4_model(tmp_path)
    capsys.readouterr()  # what writing it printed
    assert main([*bench(model, "--no-probe", "--quantization", "gguf")]) == 0
    decode_1, decode_4, prefill = json.loads(capsys.readouterr().out)["scenarios"]
    for scenario in (decode_1, decode_4):
        assert scenario["decode_graphs_recorded"] >= 1
        assert scenario["step_ms"] > 0 and scenario["step_ms_eager"] > 0
        assert scenario["phases_ms"]["forward"] > 0 and scenario["modules_ms"]
    assert prefill["phases_ms"]["forward"] > 0
    assert main([*bench(model, "--no-probe", "--quantization", "gguf", "--enforce-eager")]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["enforce_eager"] is True
    assert all(s["decode_graphs_recorded"] == 0 for s in result["scenarios"])


def test_without_the_probe_and_the_module_list_cut(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(bench(checkpoint, "--no-probe", "--top", "2")) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["machine"] is None
    for scenario in result["scenarios"]:
        assert scenario["bound_ms"] == {} and len(scenario["modules_ms"]) == 2
        top = list(scenario["modules_ms"].values())
        assert top == sorted(top, reverse=True)


@pytest.mark.parametrize(
    "extra",
    [("--batch", "0"), ("--steps", "0"), ("--prefill-tokens", "0"), ("--top", "-1")],
)
def test_bad_arguments_are_a_clear_error(
    checkpoint: Path, extra: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(bench(checkpoint, *extra)) == 2
    assert "must be" in capsys.readouterr().err


def test_the_probe_measures_and_refuses_a_cache_sized_buffer() -> None:
    peak = probe(buffer_mib=64, matmul_size=256, repeat=1)
    assert peak.read_gb_s > 0 and peak.copy_gb_s > 0 and peak.threads >= 1
    assert set(peak.matmul_tflops) == {"bfloat16", "float32"}
    with pytest.raises(ValueError, match="buffer_mib"):
        probe(buffer_mib=8)
