"""`ENCLAVE_PROCESSES`: several gateway processes on one port, still one limit and one chain."""

from __future__ import annotations

import argparse
import asyncio
import os
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest

from gateway import admin_tasks, cli_audit
from gateway.bench.fake_upstream import MODEL
from gateway.settings import Settings, SettingsError
from tests.gateway.traffic.conftest import read_records, set_limits
from tests.gateway.traffic.processes import fake_worker, fresh_postgres, gateway_process

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _processes_on(port: str) -> tuple[int, list[int]]:
    """The `enclave serve` this test started on ``port``, and the gateway processes it
    started (multiprocessing's resource tracker, also its child, is not one)."""
    parents: dict[int, int] = {}
    spawned: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if f"ENCLAVE_PORT={port}".encode() in environ:
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            if b"spawn_main" in cmdline:
                spawned.add(int(entry.name))
    serve = next(pid for pid, parent in parents.items() if parent == os.getpid())
    return serve, [pid for pid, parent in parents.items() if parent == serve and pid in spawned]


def test_two_processes_on_one_port_share_the_limit_and_the_audit_chain(
    database_url: str, redis_url: str, tmp_path: Path
) -> None:
    with (
        fake_worker(chunks=4) as (worker_url, _upstream),
        fresh_postgres(database_url) as database,
    ):
        env = {
            "ENCLAVE_MODE": "production",
            "ENCLAVE_DATABASE_URL": database,
            "ENCLAVE_REDIS_URL": redis_url,
            "ENCLAVE_SECRET_KEY": "p" * 40,
            "ENCLAVE_WORKERS": worker_url,
            "ENCLAVE_WORKER_TOKEN": "fake",
            "ENCLAVE_LOG_LEVEL": "warning",
            "ENCLAVE_PROCESSES": "2",
        }
        settings = Settings.from_env({**env, "ENCLAVE_DATA_DIR": str(tmp_path)})
        admin_tasks.migrate_database(settings)
        slug = f"dept-{uuid.uuid4().hex[:8]}"
        asyncio.run(admin_tasks.create_department(settings, slug, slug))
        asyncio.run(set_limits(settings, slug, requests_per_minute=15))
        key = asyncio.run(admin_tasks.create_key(settings, slug, "load", None, None))
        with gateway_process(env, tmp_path) as url:
            _serve, children = _processes_on(url.rsplit(":", 1)[1])
            assert len(children) == 2
            statuses: Counter[int] = Counter()
            for _ in range(40):  # a new connection each: the kernel spreads them
                response = httpx.post(
                    f"{url}/v1/chat/completions",
                    json=BODY,
                    headers={"authorization": f"Bearer {key}", "connection": "close"},
                )
                statuses[response.status_code] += 1
        assert statuses == {200: 15, 429: 25}  # one limit, whichever process answered
        records = asyncio.run(read_records(database))
        assert len(records) == 40
        assert [r["seq"] for r in records] == sorted(r["seq"] for r in records)
        assert cli_audit.run(settings, argparse.Namespace(task="verify")) == 0  # one chain


def test_more_than_one_process_needs_what_they_share_outside_them() -> None:
    base = {"database_url": "postgresql+asyncpg://db/x", "workers": "http://w:1"}
    with pytest.raises(SettingsError, match="ENCLAVE_REDIS_URL: the in-process limiter"):
        Settings(processes=2, **base)
    with pytest.raises(SettingsError, match="ENCLAVE_DATABASE_URL"):
        Settings(processes=2, redis_url="redis://r", workers="http://w:1")
    with pytest.raises(SettingsError, match="ENCLAVE_WORKERS"):
        Settings(processes=2, redis_url="redis://r", database_url="postgresql+asyncpg://db/x")
    with pytest.raises(SettingsError, match="ENCLAVE_PROCESSES must be at least 1"):
        Settings(processes=0)
    assert Settings(processes=2, redis_url="redis://r", **base).processes == 2
