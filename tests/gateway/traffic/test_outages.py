"""Postgres or Redis going away under load, and a worker dying mid-stream."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import openai
import pytest

from gateway.bench.fake_upstream import MODEL as FAKE_MODEL
from tests.gateway.traffic.conftest import RunningGateway, running_gateway, verify_records
from tests.gateway.traffic.processes import fake_worker, fresh_postgres, link_to, worker_process
from tests.inference.server.conftest import free_port

CHAT = [{"role": "user", "content": "hello"}]


def _ask(client: openai.OpenAI, i: int) -> None:
    if i % 2:
        list(client.chat.completions.create(model=FAKE_MODEL, messages=CHAT, stream=True))
    else:
        client.chat.completions.create(model=FAKE_MODEL, messages=CHAT)


def test_postgres_down_under_load_loses_no_record(database_url: str, tmp_path: Path) -> None:
    with (
        fake_worker() as (worker_url, _),
        fresh_postgres(database_url) as database,
        link_to(database) as (link, through),
        running_gateway(tmp_path, [worker_url], database_url=through) as gateway,
    ):
        client = gateway.client(gateway.department("quality"))
        for i in range(10):
            _ask(client, i)
        link.cut()
        for i in range(40):  # the key is served from its last good lookup meanwhile
            _ask(client, i)
        spool = gateway.settings.audit_spool_dir
        assert any(p.stat().st_size for p in spool.iterdir()), "nothing was spooled"
        link.restore()
        for i in range(10):
            _ask(client, i)
        records = gateway.audit_records(wait_for=60, timeout=30)
        assert len(records) == 60
        assert [r["status_code"] for r in records] == [200] * 60
        assert len({r["request_id"] for r in records}) == 60
        assert asyncio.run(verify_records(database, tmp_path)) == (True, 60)


def test_a_key_never_seen_while_postgres_is_down_is_refused_and_audited(
    database_url: str, tmp_path: Path
) -> None:
    with (
        fake_worker() as (worker_url, _),
        fresh_postgres(database_url) as database,
        link_to(database) as (link, through),
        running_gateway(tmp_path, [worker_url], database_url=through) as gateway,
    ):
        known = gateway.client(gateway.department("quality"))
        unseen = gateway.client(gateway.department("office"))  # created, never used
        _ask(known, 0)
        link.cut()
        _ask(known, 1)  # served from its last good lookup
        with pytest.raises(openai.InternalServerError) as down:
            unseen.chat.completions.create(model=FAKE_MODEL, messages=CHAT)
        assert down.value.status_code == 503
        assert "database" in down.value.message
        link.restore()
        _ask(known, 2)
        records = gateway.audit_records(wait_for=4, timeout=30)
        assert [(r["status_code"], r["reason"]) for r in records] == [
            (200, ""),
            (200, ""),
            (503, "database_unavailable"),
            (200, ""),
        ]
        assert records[2]["endpoint"] == "chat.completions" and records[2]["api_key_id"] is None
        assert asyncio.run(verify_records(database, tmp_path)) == (True, 4)


def test_redis_down_fails_closed_by_default(redis_url: str, tmp_path: Path) -> None:
    with (
        fake_worker() as (worker_url, _),
        link_to(redis_url) as (link, through),
        running_gateway(tmp_path, [worker_url], redis_url=through) as gateway,
    ):
        client = gateway.client(gateway.department("quality", requests_per_minute=1000))
        client.chat.completions.create(model=FAKE_MODEL, messages=CHAT)
        link.cut()
        with pytest.raises(openai.InternalServerError) as down:
            client.chat.completions.create(model=FAKE_MODEL, messages=CHAT)
        assert down.value.status_code == 503
        assert "Redis" in down.value.message
        link.restore()
        client.chat.completions.create(model=FAKE_MODEL, messages=CHAT)
        reasons = [r["reason"] for r in gateway.audit_records(wait_for=3)]
        assert reasons == ["", "limiter_unavailable", ""]


def test_redis_down_with_fail_open_admits(redis_url: str, tmp_path: Path) -> None:
    with (
        fake_worker() as (worker_url, _),
        link_to(redis_url) as (link, through),
        running_gateway(
            tmp_path, [worker_url], redis_url=through, limits_fail_open=True
        ) as gateway,
    ):
        client = gateway.client(gateway.department("quality", requests_per_minute=1000))
        link.cut()
        reply = client.chat.completions.create(model=FAKE_MODEL, messages=CHAT)
        assert reply.choices[0].message.content == "ok"


def test_worker_killed_mid_stream(tiny_checkpoint: Path, tmp_path: Path) -> None:
    port = free_port()
    worker = worker_process(tiny_checkpoint, port, tmp_path / "worker.log")
    try:
        with running_gateway(tmp_path, [f"http://127.0.0.1:{port}"]) as gateway:
            _stream_until_the_worker_dies(gateway, worker)
            record = gateway.audit_records(wait_for=1)[-1]
            assert record["status_code"] == 502
            assert record["reason"] == "upstream_broke"
            assert "stream broke" in record["error"]
    finally:
        worker.kill()
        worker.wait()


def _stream_until_the_worker_dies(gateway: RunningGateway, worker: subprocess.Popen[bytes]) -> None:
    client = gateway.client(gateway.department("quality"))
    stream = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=200,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    received = 0
    with pytest.raises(openai.APIError) as broke:
        for _ in stream:
            received += 1
            if received == 3:
                os.kill(worker.pid, signal.SIGKILL)
    assert "stream broke" in broke.value.message
