"""SIGTERM drains a real `python -m inference serve` process, then it exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.inference.server.conftest import free_port

ROOT = Path(__file__).resolve().parents[3]
# The tiny model makes a token in well under a millisecond: 8 samples of 500 tokens keep
# the drain going long enough for the test to see it.
BODY = {
    "model": "tiny", "prompt": "Drain me", "max_tokens": 500, "n": 8, "ignore_eos": True,
    "temperature": 1.0, "stream": True,
}  # fmt: skip


@contextmanager
def worker_process(
    checkpoint: Path, drain_timeout: str
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    port = free_port()
    command = [
        sys.executable, "-m", "inference", "serve", "--model", str(checkpoint),
        "--port", str(port), "--served-model-name", "tiny", "--dtype", "float32",
        "--max-model-len", "512", "--kv-cache-memory-bytes", str(4 << 20),
        "--drain-timeout", drain_timeout,
    ]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert process.poll() is None, process.stdout.read() if process.stdout else ""
            try:
                if httpx.get(f"{url}/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the worker did not become ready"
            time.sleep(0.1)
        yield process, url
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait()


def stream_through_sigterm(
    process: subprocess.Popen[str], url: str, *, check_draining: bool
) -> set[str]:
    """Start a stream, SIGTERM the worker after its first event, read the stream out;
    return the finish reasons of its choices."""
    events: list[str] = []
    with (
        httpx.Client(base_url=url, timeout=60) as client,
        client.stream("POST", "/v1/completions", json=BODY) as stream,
    ):
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: "):
                events.append(line)
                break
        process.send_signal(signal.SIGTERM)
        if check_draining:
            deadline = time.monotonic() + 5
            while (ready := client.get("/ready")).status_code == 200:
                assert time.monotonic() < deadline, "/ready never turned 503"
            assert ready.status_code == 503 and ready.json()["status"] == "draining"
            refused = client.post("/v1/completions", json={**BODY, "stream": False})
            assert refused.status_code == 503 and "retry-after" in refused.headers
        events.extend(line for line in lines if line.startswith("data: "))
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(event[len("data: ") :]) for event in events[:-1]]
    ends = [c for chunk in chunks for c in chunk["choices"] if c["finish_reason"] is not None]
    assert sorted(c["index"] for c in ends) == list(range(8))  # each choice ends once
    return {c["finish_reason"] for c in ends}


def test_sigterm_lets_the_stream_finish_then_exits_0(checkpoint: Path) -> None:
    with worker_process(checkpoint, drain_timeout="60") as (process, url):
        assert stream_through_sigterm(process, url, check_draining=True) == {"length"}
        assert process.wait(timeout=30) == 0


@pytest.mark.timeout(120)
def test_drain_timeout_cuts_the_stream_off_cleanly(checkpoint: Path) -> None:
    # A zero timeout cuts off at once: the stream still ends with a finish reason and
    # [DONE], and the process still exits 0.
    with worker_process(checkpoint, drain_timeout="0") as (process, url):
        assert stream_through_sigterm(process, url, check_draining=False) == {"abort"}
        assert process.wait(timeout=30) == 0
