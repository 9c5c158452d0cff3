"""A worker reachable from other machines needs a token, or an explicit --insecure-no-auth."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from inference.server.cli import add_arguments, settings_from

ROOT = Path(__file__).resolve().parents[3]
LOOPBACK = ["127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LOCALHOST"]
REACHABLE = ["0.0.0.0", "::", "10.0.0.5", "192.168.1.20", "example.com", "::ffff:127.0.0.1"]


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(["--model", "m", *argv])


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_serves_without_a_token(host: str) -> None:
    assert settings_from(parse("--host", host)).api_key is None


@pytest.mark.parametrize("host", REACHABLE)
def test_a_reachable_host_needs_a_token_or_the_flag(
    host: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError, match="--api-key-env") as refused:
        settings_from(parse("--host", host))
    assert "--insecure-no-auth" in str(refused.value)
    assert settings_from(parse("--host", host, "--insecure-no-auth")).api_key is None
    monkeypatch.setenv("WORKER_TOKEN_FOR_TEST", "s3cret")
    settings = settings_from(parse("--host", host, "--api-key-env", "WORKER_TOKEN_FOR_TEST"))
    assert settings.api_key == "s3cret"


def test_the_command_refuses_with_status_2_and_no_traceback(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "inference", "serve", "--model", str(tmp_path)]
    done = subprocess.run(
        [*command, "--host", "0.0.0.0", "--port", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "--host 0.0.0.0" in done.stderr and "--api-key-env" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_the_token_can_come_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "worker_token"
    token.write_text("from-a-file\n")
    monkeypatch.setenv("WORKER_TOKEN_FOR_TEST_FILE", str(token))
    settings = settings_from(parse("--host", "0.0.0.0", "--api-key-env", "WORKER_TOKEN_FOR_TEST"))
    assert settings.api_key == "from-a-file"
    monkeypatch.setenv("WORKER_TOKEN_FOR_TEST", "also-set")
    with pytest.raises(ValueError, match="both set"):
        settings_from(parse("--api-key-env", "WORKER_TOKEN_FOR_TEST"))
    monkeypatch.delenv("WORKER_TOKEN_FOR_TEST")
    token.unlink()
    with pytest.raises(ValueError, match=f"WORKER_TOKEN_FOR_TEST_FILE: cannot read {token}"):
        settings_from(parse("--api-key-env", "WORKER_TOKEN_FOR_TEST"))
    monkeypatch.delenv("WORKER_TOKEN_FOR_TEST_FILE")
    with pytest.raises(ValueError, match="neither WORKER_TOKEN_FOR_TEST nor"):
        settings_from(parse("--api-key-env", "WORKER_TOKEN_FOR_TEST"))
