"""`python -m inference bench throughput` on a tiny random checkpoint: its JSON, its errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.__main__ import main
from inference.model.loader import cpu_has_native_bf16
from tests.inference.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("throughput"))


def bench(checkpoint: Path, *extra: str) -> list[str]:
    return [
        *("bench", "throughput", "--model", str(checkpoint), "--dtype", "float32"),
        *("--num-prompts", "3", "--input-len", "8", "--output-len", "4", "--prefix-len", "16"),
        *("--max-num-seqs", "2", *extra),
    ]


def test_reports_both_engines_and_writes_the_json(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.json"
    args = bench(checkpoint, "--rounds", "2", "--naive-prompts", "1", "--output", str(out))
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result == json.loads(out.read_text())
    assert result["benchmark"] == "throughput" and "family" in result["cpu"]
    assert result["rss_mib"] > 0
    assert result["prompt_tokens"] == 3 * (16 + 8)
    assert len(result["elapsed_seconds_per_round"]) == 2
    assert result["elapsed_seconds"] == min(result["elapsed_seconds_per_round"])
    # 3 prompts x 4 tokens over the best round's time (printed to 0.01 s, the rate to 0.1:
    # on a loaded machine a round takes seconds and the rate's own rounding is the larger).
    elapsed = result["elapsed_seconds"]
    low, high = 12 / (elapsed + 0.006), 12 / max(elapsed - 0.006, 1e-3)
    assert low - 0.05 <= result["output_tokens_per_s"] <= high + 0.05
    # Each round's prompts are new, but all three share a 16-token prefix (one block): a
    # prompt prefilled after the first finds it cached.
    assert result["cached_prompt_tokens"] >= 16
    naive = result["naive_transformers"]
    assert len(naive["output_tokens_per_s_per_round"]) == 2
    assert result["speedup_output_tokens_per_s"] == pytest.approx(
        result["output_tokens_per_s"] / naive["output_tokens_per_s"], abs=0.1
    )


def test_default_dtype_is_what_serve_picks(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --dtype the bench runs (and reports) the dtype serve's auto picks on this CPU,
    the transformers baseline in the same one."""
    args = bench(checkpoint, "--rounds", "1", "--naive-prompts", "1")
    at = args.index("--dtype")
    assert main(args[:at] + args[at + 2 :]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["dtype"] == ("bfloat16" if cpu_has_native_bf16() else "float32")
    assert result["naive_transformers"]["output_tokens_per_s"] > 0


def test_fp8_weights(checkpoint: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main([*bench(checkpoint, "--rounds", "1", "--naive-prompts", "0"), "--quantization", "fp8"])
        == 0
    )
    result = json.loads(capsys.readouterr().out)
    assert result["quantization"] == "fp8" and "naive_transformers" not in result
    # The tiny Llama is untied: its e4m3 layers, their float32 scales and the norms are
    # what a step reads (the table is not).
    assert 0 < result["weight_bytes_per_decode_step"] < 2**20


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--num-prompts", "0", "--num-prompts must be at least 1"),
        ("--rounds", "0", "--rounds must be at least 1"),
        ("--naive-prompts", "-1", "must not be negative"),
    ],
)
def test_bad_input_is_a_clear_error(
    checkpoint: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    assert main([*bench(checkpoint), flag, value]) == 2
    assert message in capsys.readouterr().err


def test_constrained_share_compares_a_mixed_batch_with_an_all_free_one(
    checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    extra = ("--rounds", "1", "--naive-prompts", "0", "--constrained-share", "0.5")
    args = [*bench(checkpoint, *extra), "--num-prompts", "4", "--output-len", "12"]
    assert main(args) == 0
    constrained = json.loads(capsys.readouterr().out)["constrained"]
    assert constrained["num_constrained"] == 2
    for name in ("all_free", "mixed", "mixed_inline"):
        assert constrained[name]["output_tokens"] == 4 * 12  # every request ran to max_tokens
    mixed = constrained["mixed"]
    assert mixed["constrained_finish_reasons"] == {"length": 2}
    assert mixed["constrained_text_sample"].startswith('{"findings":[{"')
    assert mixed["constrained_rows"] == 2 * 12 and mixed["mask_fill_ms_per_step"] > 0
    assert constrained["mixed_vs_all_free"] == pytest.approx(
        mixed["output_tokens_per_s"] / constrained["all_free"]["output_tokens_per_s"], abs=0.01
    )
    assert main([*bench(checkpoint), "--constrained-share", "1.5"]) != 0
