"""The worker's draft-model flags: they reach the engine config, a draft with another
tokenizer is a one-line CLI error (exit 2) before anything loads, and a worker with a
draft answers what a plain one does."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import httpx
import pytest

from inference.__main__ import main
from inference.server.app import create_app
from inference.server.cli import add_arguments, engine_config_kwargs
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import API_KEY, MODEL, metric, serving, tiny_engine


def test_draft_flags_reach_the_engine_config() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    draft = ["--speculative", "draft", "--draft-model", "d", "--draft-kv-cache-fraction", "0.25"]
    args = parser.parse_args(["--model", "m", *draft])
    kwargs = engine_config_kwargs(args)
    assert kwargs["speculative"] == "draft" and kwargs["draft_model"] == "d"
    assert kwargs["draft_kv_cache_fraction"] == 0.25


def test_a_draft_with_another_tokenizer_is_a_cli_error(
    checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        shutil.copy(checkpoint / name, other / name)
    tok = json.loads((other / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.__getitem__)[200:202]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(tok))
    serve = ["serve", "--model", str(checkpoint), "--speculative", "draft"]
    assert main([*serve, "--draft-model", str(other)]) == 2
    err = capsys.readouterr().err
    assert "does not share the target model's tokenizer: 2 tokens differ" in err
    assert main([*serve, "--draft-model", str(tmp_path / "missing")]) == 2
    assert "--draft-model" in capsys.readouterr().err
    assert main(serve) == 2
    assert "speculative='draft' needs draft_model" in capsys.readouterr().err


def test_a_worker_with_a_draft_answers_the_plain_tokens(checkpoint: Path) -> None:
    engine = tiny_engine(
        checkpoint, speculative="draft", draft_model=str(checkpoint), num_speculative_tokens=3
    )
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"model": MODEL, "prompt": "the bore, the bore", "max_tokens": 24, "temperature": 0}
    with (
        serving(create_app(engine, settings)) as url,
        httpx.Client(base_url=url, headers=headers, timeout=60) as http,
    ):
        off = http.post("/v1/completions", json={**body, "speculative": False})
        on = http.post("/v1/completions", json=body)
        assert off.status_code == on.status_code == 200
        assert on.json()["choices"][0]["text"] == off.json()["choices"][0]["text"]
        page = http.get("/metrics").text
        proposed = metric(page, "inference_spec_decode_proposed_tokens_total")
        assert proposed > 0  # the model drafting for itself, in float32: all accepted
        assert metric(page, "inference_spec_decode_accepted_tokens_total") == proposed
