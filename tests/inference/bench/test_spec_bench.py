"""`python -m inference bench throughput --speculative ngram` on a tiny random checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.__main__ import main
from tests.inference.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("spec-bench"))


@pytest.mark.parametrize("workload", ["repetitive", "random"])
def test_compares_plain_and_speculative_side_by_side(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: str
) -> None:
    out = tmp_path / "spec.json"
    args = [
        *("bench", "throughput", "--model", str(checkpoint), "--dtype", "float32"),
        *("--speculative", "ngram", "--num-speculative-tokens", "3", "--workload", workload),
        *("--num-prompts", "2", "--input-len", "24", "--output-len", "24", "--rounds", "2"),
        *("--date", "2026-12-03", "--output", str(out)),
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(out.read_text())
    assert result["benchmark"] == "throughput-speculative" and result["date"] == "2026-12-03"
    assert len(result["load_average_before"]) == 3
    # float32: greedy speculation gives exactly the plain tokens.
    assert result["sequences_identical"] == "4/4"
    assert len(result["plain_tokens_per_s_per_round"]) == 2
    assert result["plain_output_tokens_per_s"] == max(result["plain_tokens_per_s_per_round"])
    assert result["speedup"] == pytest.approx(
        result["speculative_output_tokens_per_s"] / result["plain_output_tokens_per_s"], abs=0.01
    )
    assert result["proposed_tokens"] >= result["accepted_tokens"]
    assert 0 <= result["acceptance_rate"] <= 1
