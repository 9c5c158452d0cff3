"""The embedded worker gets an allow-listed environment and its token, none of the
gateway's secrets; and its log is private."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gateway.domain.workers.supervisor import (
    CACHE_ENV,
    TOKEN_ENV,
    WorkerStartError,
    WorkerSupervisor,
)
from gateway.domain.workers.worker_env import worker_environment
from gateway.settings import Settings, SettingsError
from tests.gateway.workers.conftest import TOKEN
from tests.inference.server.conftest import free_port

SECRETS = {
    "ENCLAVE_SECRET_KEY": "gateway-secret-key-0123456789abcdef",
    "ENCLAVE_DATABASE_URL": "postgresql+asyncpg://enclave:db-password@db/enclave",
    "ENCLAVE_OIDC_CLIENT_SECRET": "oidc-client-secret",
    "ENCLAVE_REDIS_URL": "redis://:redis-password@redis:6379/0",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "HF_TOKEN": "hf-token",
    "DATABASE_URL": "postgresql://other:password@db/other",
}
NEEDED = {
    "CUDA_VISIBLE_DEVICES": "0,1",
    "OMP_NUM_THREADS": "4",
    "TRITON_CACHE_DIR": "/var/cache/triton",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "HIP_VISIBLE_DEVICES": "0",
    "NCCL_DEBUG": "WARN",
    "LC_ALL": "C.UTF-8",
    "OPERATOR_ADDED": "kept because ENCLAVE_WORKER_ENV names it",
}


def fake_python(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for the worker's interpreter: it writes its environment and exits."""
    dump = tmp_path / "environment"
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\n/usr/bin/env -0 > {dump}\nexit 3\n")
    script.chmod(0o755)
    return script, dump


async def test_the_worker_sees_no_gateway_secret_and_its_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in {**SECRETS, **NEEDED}.items():
        monkeypatch.setenv(name, value)
    python, dump = fake_python(tmp_path)
    previous = os.umask(0o022)
    try:
        supervisor = WorkerSupervisor(
            tmp_path, free_port(), TOKEN, log_dir=tmp_path / "data", python=str(python),
            extra_env_names=["OPERATOR_ADDED"],
        )  # fmt: skip
        with pytest.raises(WorkerStartError, match="exited"):
            await supervisor.start(ready_timeout=30)
        await supervisor.close()
    finally:
        os.umask(previous)
    pairs = [item.split("=", 1) for item in dump.read_text().split("\0") if item]
    child = dict(pairs)
    assert child[TOKEN_ENV] == TOKEN
    for name in SECRETS:
        assert name not in child, name
    for value in SECRETS.values():
        assert all(value not in v for v in child.values()), value
    assert {name: child.get(name) for name in NEEDED} == NEEDED
    assert child["PATH"] == os.environ["PATH"]
    assert not [name for name in child if name.startswith("ENCLAVE_") and name != TOKEN_ENV]
    # The worker's log: its directory 0700, the file 0600 (it may quote prompts).
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    assert stat.S_IMODE(supervisor.log_path.stat().st_mode) == 0o600


def test_the_allow_list() -> None:
    parent = {**SECRETS, **NEEDED, "PATH": "/usr/bin", "HOME": "/home/enclave"}
    child = worker_environment(parent, TOKEN_ENV, "t", ["OPERATOR_ADDED", "ENCLAVE_SECRET_KEY"])
    assert child == {**NEEDED, "PATH": "/usr/bin", "HOME": "/home/enclave", TOKEN_ENV: "t"}
    assert Settings(worker_env=" A, B ,").worker_env_names == ["A", "B"]
    with pytest.raises(SettingsError, match="ENCLAVE_WORKER_ENV"):
        Settings(worker_env="ENCLAVE_SECRET_KEY")


async def _child_environment(tmp_path: Path, cache_dir: Path | None) -> dict[str, str]:
    python, dump = fake_python(tmp_path)
    supervisor = WorkerSupervisor(
        tmp_path, free_port(), TOKEN, log_dir=tmp_path / "data", python=str(python),
        cache_dir=cache_dir,
    )  # fmt: skip
    with pytest.raises(WorkerStartError, match="exited"):
        await supervisor.start(ready_timeout=30)
    await supervisor.close()
    return dict(item.split("=", 1) for item in dump.read_text().split("\0") if item)


async def test_the_worker_caches_under_the_data_dir_unless_the_gateway_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    cache_dir = tmp_path / "data" / "cache"
    assert (await _child_environment(tmp_path, cache_dir))[CACHE_ENV] == str(cache_dir)
    assert CACHE_ENV not in await _child_environment(tmp_path, None)
    monkeypatch.setenv(CACHE_ENV, "off")  # the operator's choice reaches the worker
    assert (await _child_environment(tmp_path, cache_dir))[CACHE_ENV] == "off"


def test_the_embedded_worker_caches_in_the_data_dir(tmp_path: Path) -> None:
    from gateway.traffic_setup import embedded_supervisor

    supervisor = embedded_supervisor(Settings(data_dir=tmp_path))
    assert supervisor.cache_dir == (tmp_path / "cache").resolve()
