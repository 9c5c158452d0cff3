"""`bench serve`: its arithmetic, and one short run against the test worker."""

from __future__ import annotations

import argparse
import json

import pytest

from inference.bench.serve import add_arguments, make_workload, percentile
from tests.inference.server.conftest import API_KEY


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_percentiles_interpolate_between_ranks() -> None:
    values = [float(v) for v in range(1, 102)]  # 1..101: the q-th percentile is q + 1
    assert percentile(values, 50) == 51 and percentile(values, 90) == 91
    assert percentile([4.0, 2.0], 50) == 3.0
    assert percentile([], 50) is None


def test_workload_is_mixed_and_shares_the_prefix() -> None:
    args = parse("--base-url", "x", "--num-prompts", "20", "--prefix-words", "30")
    workload = make_workload(args)
    prefixes = {" ".join(prompt.split()[:30]) for prompt, _ in workload}
    assert len(prefixes) == 1
    assert len({len(prompt.split()) for prompt, _ in workload}) > 5
    assert all(16 <= max_tokens <= 128 for _, max_tokens in workload)
    assert make_workload(args) == workload  # seeded


def test_a_short_run_against_the_worker(
    worker_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BENCH_TEST_KEY", API_KEY)
    args = parse(
        "--base-url", worker_url, "--num-prompts", "4", "--request-rate", "50",
        "--max-input-words", "40", "--min-output-len", "4", "--max-output-len", "8",
        "--api-key-env", "BENCH_TEST_KEY",
    )  # fmt: skip
    assert args.run(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["completed"] == 4 and report["failed"] == 0
    assert 16 <= report["total_output_tokens"] <= 32
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        summary = report[key]
        assert 0 < summary["p50"] <= summary["p90"] <= summary["p99"]
    assert report["e2e_ms"]["p50"] >= report["ttft_ms"]["p50"]
