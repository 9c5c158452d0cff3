from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_bad_setting_is_a_readable_start_up_error() -> None:
    env = {**os.environ, "ENCLAVE_PORT": "not-a-port"}
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "ENCLAVE_PORT must be an integer" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_answers_health_and_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "ENCLAVE_PORT": str(port),
        "ENCLAVE_LOG_FORMAT": "json",
        "ENCLAVE_DATA_DIR": str(tmp_path),
        # A worker elsewhere (not answering): the embedded worker is the supervisor's tests'.
        "ENCLAVE_WORKERS": "http://127.0.0.1:9",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        assert response.status_code == 200
        proc.send_signal(signal.SIGINT)
        output, _ = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert '"event": "request"' in output
    # The embedded first start generated its secret (0600), migrated, and printed a login.
    assert "First start: sign in" in output and "admin@enclave.local" in output
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "enclave.db").exists()


def _enclave(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ENCLAVE_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args], env=env, capture_output=True, text=True
    )


def test_admin_commands_for_scripting(tmp_path: Path) -> None:
    assert _enclave(tmp_path, "migrate").returncode == 0
    admin = _enclave(tmp_path, "admin", "create-admin", "ops@example.test")
    assert admin.returncode == 0 and "shown once" in admin.stdout
    made = _enclave(tmp_path, "admin", "create-department", "Research", "--slug", "research")
    assert made.returncode == 0, made.stderr
    again = _enclave(tmp_path, "admin", "create-department", "Research", "--slug", "research")
    assert again.returncode == 1 and "Traceback" not in again.stderr
    quota = _enclave(tmp_path, "admin", "set-quota", "research", "--monthly-tokens", "5000")
    assert quota.returncode == 0, quota.stderr
    key = _enclave(tmp_path, "admin", "create-key", "research", "--name", "ci", "--model", "tiny")
    assert key.returncode == 0 and key.stdout.strip().startswith("sk-enc-")
    listed = _enclave(tmp_path, "admin", "list-keys", "--department", "research")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["name"], r["allowed_models"]) for r in rows] == [("ci", ["tiny"])]
    assert key.stdout.strip() not in listed.stdout
    missing = _enclave(tmp_path, "admin", "create-key", "nowhere", "--name", "x")
    assert missing.returncode == 1 and "nowhere" in missing.stderr
