"""Speculative decoding through the worker: the CLI flags, the request field, /metrics."""

from __future__ import annotations

import argparse
from pathlib import Path

import httpx

from inference.server.app import create_app
from inference.server.cli import add_arguments, engine_config_kwargs
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import API_KEY, MODEL, metric, serving, tiny_engine

PROMPT = "a b c d e a b c d e a b c d e a b c d e a b"


def test_cli_flags_reach_the_engine_config() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--model", "m", "--speculative", "ngram", "--num-speculative-tokens", "5"]
    )
    kwargs = engine_config_kwargs(args)
    assert kwargs["speculative"] == "ngram" and kwargs["num_speculative_tokens"] == 5
    assert engine_config_kwargs(parser.parse_args(["--model", "m"]))["speculative"] is None


def test_speculative_worker_answers_the_plain_tokens_and_reports_acceptance(
    checkpoint: Path,
) -> None:
    engine = tiny_engine(checkpoint, speculative="ngram", num_speculative_tokens=4)
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 32, "temperature": 0}
    with (
        serving(create_app(engine, settings)) as url,
        httpx.Client(base_url=url, headers=headers, timeout=60) as http,
    ):
        off = http.post("/v1/completions", json={**body, "speculative": False})
        assert off.status_code == 200
        assert metric(http.get("/metrics").text, "inference_spec_decode_proposed_tokens_total") == 0
        on = http.post("/v1/completions", json=body)
        assert on.status_code == 200
        assert on.json()["choices"][0]["text"] == off.json()["choices"][0]["text"]
        page = http.get("/metrics").text
        proposed = metric(page, "inference_spec_decode_proposed_tokens_total")
        accepted = metric(page, "inference_spec_decode_accepted_tokens_total")
        assert proposed > 0 and 0 < accepted <= proposed
        rate = metric(page, "inference_spec_decode_acceptance_rate")
        assert rate == accepted / proposed
        assert metric(page, "inference_spec_decode_mean_accepted_length") > 1
        bad = http.post("/v1/completions", json={**body, "speculative": "yes"})
        assert bad.status_code == 400
        assert "speculative" in bad.json()["error"]["message"]
