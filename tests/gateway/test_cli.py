from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

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


def test_serve_answers_health_and_stops_cleanly_on_ctrl_c() -> None:
    port = _free_port()
    env = {**os.environ, "ENCLAVE_PORT": str(port), "ENCLAVE_LOG_FORMAT": "json"}
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
