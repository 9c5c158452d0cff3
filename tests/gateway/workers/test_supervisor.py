"""The embedded worker: a real `python -m inference serve` child on a tiny model."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gateway.domain.workers import orphan_guard
from gateway.domain.workers.supervisor import WorkerStartError, WorkerSupervisor
from gateway.domain.workers.worker_token import TOKEN_FILE, embedded_worker_token
from gateway.settings import Settings
from tests.gateway.workers.conftest import TOKEN
from tests.inference.server.conftest import free_port

TINY_ARGS = ["--dtype", "float32", "--max-model-len", "256", "--kv-cache-memory-bytes", "4194304"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_for(condition: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition did not hold in time"
        await asyncio.sleep(0.05)


async def test_starts_restarts_after_kill_and_stops(tiny_checkpoint: Path, tmp_path: Path) -> None:
    supervisor = WorkerSupervisor(
        tiny_checkpoint, free_port(), TOKEN, served_name="tiny", log_dir=tmp_path,
        extra_args=TINY_ARGS,
    )  # fmt: skip
    supervisor.min_backoff_s = 0.2
    assert not supervisor.starting and not supervisor.running
    starting = asyncio.create_task(supervisor.start(ready_timeout=60))
    # While its readiness check waits, it says it is starting, and not yet running.
    await wait_for(lambda: supervisor.pid is not None, timeout=30)
    assert supervisor.starting and not supervisor.running
    url = await starting
    assert supervisor.running and not supervisor.starting
    try:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/ready")).status_code == 200
            # The token reached the worker through its environment: it is now required.
            assert (await client.get("/v1/models")).status_code == 401
            models = await client.get("/v1/models", headers={"Authorization": f"Bearer {TOKEN}"})
            assert [card["id"] for card in models.json()["data"]] == ["tiny"]
            assert TOKEN not in " ".join(supervisor.command())  # never on the command line

            first = supervisor.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            await wait_for(lambda: supervisor.restarts == 1, timeout=30)
            assert supervisor.pid not in (None, first)
            assert (await client.get("/ready")).status_code == 200
    finally:
        await supervisor.close(drain_timeout=10)
    second = supervisor.pid
    assert second is None and supervisor.restarts == 1
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/ready", timeout=2)
    await asyncio.sleep(0.5)  # longer than the backoff: a restart would have begun
    assert supervisor.pid is None and supervisor.restarts == 1
    assert "Uvicorn running" in (tmp_path / f"worker-{supervisor.port}.log").read_text()


async def test_a_worker_that_exits_at_start_fails_with_its_log(tmp_path: Path) -> None:
    supervisor = WorkerSupervisor(
        tmp_path, free_port(), TOKEN, log_dir=tmp_path, extra_args=["--no-such-flag"]
    )
    with pytest.raises(WorkerStartError) as failed:
        await supervisor.start(ready_timeout=30)
    message = str(failed.value)
    assert "exited (status 2) before it was ready" in message
    assert "unrecognized arguments: --no-such-flag" in message
    await supervisor.close()
    missing = WorkerSupervisor(
        tmp_path, free_port(), TOKEN, log_dir=tmp_path, python=str(tmp_path / "no-python")
    )
    with pytest.raises(WorkerStartError, match="could not be started"):
        await missing.start()


def test_the_worker_dies_with_a_killed_gateway(tmp_path: Path) -> None:
    # A stand-in gateway starts a child through the guard, then is killed with SIGKILL.
    parent = subprocess.Popen(
        [
            sys.executable, "-c",
            "import os, subprocess, sys, time\n"
            f"child = subprocess.Popen([sys.executable, {orphan_guard.__file__!r},"
            " str(os.getpid()), '/bin/sleep', '60'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(60)\n",
        ],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")[0] != b"/bin/sleep":
        assert time.monotonic() < deadline, "the guard did not exec its program"
        time.sleep(0.02)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 5
    # The orphan is re-parented (to init or a subreaper), which reaps it once it is gone.
    while alive(child) and Path(f"/proc/{child}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the child outlived its parent"
        time.sleep(0.02)


def test_worker_token_is_generated_once_private_or_configured(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    token = embedded_worker_token(settings)
    assert len(token) >= 32
    assert embedded_worker_token(settings) == token
    assert stat.S_IMODE((tmp_path / TOKEN_FILE).stat().st_mode) == 0o600
    configured = Settings(data_dir=tmp_path / "other", worker_token="set-by-the-admin")
    assert embedded_worker_token(configured) == "set-by-the-admin"
    assert not (tmp_path / "other").exists()
