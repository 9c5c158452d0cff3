"""ENCLAVE_WORKER_ARGS: the operator's options reach the embedded worker's command line,
checked with the worker's own parser when the gateway starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.domain.workers.worker_args import WorkerArgsError, parse_worker_args
from gateway.settings import Settings, SettingsError
from gateway.traffic_setup import embedded_supervisor

ROOT = Path(__file__).resolve().parents[3]


def test_options_are_split_as_a_shell_would() -> None:
    assert parse_worker_args("") == []
    assert parse_worker_args("  --quantization fp8  --step-time-budget-ms=0 ") == [
        "--quantization",
        "fp8",
        "--step-time-budget-ms=0",
    ]
    assert parse_worker_args("--tokenizer '/models/my tokenizer'") == [
        "--tokenizer",
        "/models/my tokenizer",
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("--port 9000", "--port: the gateway sets"),
        ("--po=9000", "--port: the gateway sets"),  # argparse would take the abbreviation
        ("--model other.gguf", "--model: the gateway sets"),
        ("--served-model-name x", "--served-model-name: the gateway sets"),
        ("--api-key-env OTHER", "--api-key-env: the gateway sets"),
        ("--insecure", "--insecure-no-auth: the gateway sets"),
        ("--host=0.0.0.0", "--host: the gateway sets"),
        ("--no-such-option 1", "unrecognized arguments"),
        ("--quantization int3", "invalid choice"),
        ("--max-num-seqs", "expected one argument"),
        ("--max-num-seqs many", "invalid int value"),
        ('--tokenizer "unclosed', "No closing quotation"),
    ],
)
def test_what_the_worker_would_refuse_or_the_gateway_sets_is_refused(
    text: str, message: str
) -> None:
    with pytest.raises(WorkerArgsError, match=message):
        parse_worker_args(text)
    with pytest.raises(SettingsError, match=f"ENCLAVE_WORKER_ARGS: .*{message}"):
        Settings(worker_args=text)


def test_the_embedded_worker_gets_them_after_its_own(tmp_path: Path) -> None:
    settings = Settings(
        worker_args="--quantization fp8 --max-num-seqs 8", data_dir=tmp_path, model="m.gguf"
    )
    command = embedded_supervisor(settings).command()
    assert command[-4:] == ["--quantization", "fp8", "--max-num-seqs", "8"]
    assert command[command.index("--model") + 1] == "m.gguf"
    # A swap's side-by-side worker keeps them.
    sibling = embedded_supervisor(settings).sibling(tmp_path / "n.gguf", 8200, None)
    assert sibling.command()[-4:] == command[-4:]


def test_enclave_serve_stops_with_the_message(tmp_path: Path) -> None:
    env = {**os.environ, "ENCLAVE_WORKER_ARGS": "--port 1"}
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "configuration error: ENCLAVE_WORKER_ARGS: --port: the gateway sets" in done.stderr
    assert "Traceback" not in done.stderr
