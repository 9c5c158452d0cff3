"""Every request through the gateway leaves exactly one record, and the chain proves it."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine

from tests.gateway.traffic.conftest import MODEL, RunningGateway, read_records, running_gateway
from tests.gateway.traffic.processes import fresh_postgres

REQUESTS = 500
CONCURRENCY = 16


@pytest.fixture
def postgres_gateway(
    worker: str, database_url: str, redis_url: str, tmp_path: Path
) -> Iterator[RunningGateway]:
    with (
        fresh_postgres(database_url) as database,
        running_gateway(tmp_path, [worker], database_url=database, redis_url=redis_url) as gw,
    ):
        yield gw


async def _traffic(gateway: RunningGateway, key: str) -> dict[str, dict[str, Any]]:
    """500 requests of four kinds; what each client saw, by request id."""
    client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    seen: dict[str, dict[str, Any]] = {}
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(i: int) -> None:
        kind, rid = i % 4, f"audit-{i}"
        messages = [{"role": "user", "content": f"Report {i // 4} on the bore."}]
        common: dict[str, Any] = {
            "model": MODEL,
            "messages": messages,
            "temperature": 0,
            "extra_headers": {"x-request-id": rid},
            "extra_body": {"ignore_eos": True},
        }
        async with gate:
            if kind == 0:
                reply = await client.chat.completions.create(max_tokens=3, **common)
                assert reply.usage is not None
                seen[rid] = {"prompt": reply.usage.prompt_tokens, "completion": 3}
            elif kind in (1, 2):
                options = {"include_usage": True} if kind == 1 else None
                stream = await client.chat.completions.create(
                    max_tokens=3, stream=True, stream_options=options, **common
                )
                chunks = [chunk async for chunk in stream]
                usage = chunks[-1].usage if kind == 1 else None
                seen[rid] = {"prompt": usage.prompt_tokens if usage else None, "completion": 3}
            else:
                stream = await client.chat.completions.create(max_tokens=200, stream=True, **common)
                async for _ in stream:
                    break
                await stream.close()
                seen[rid] = {"cancelled": True}

    # Every openai stream leaves suspended async generators of httpx behind (openai breaks
    # out of them at [DONE] or on close without closing them). With the gateway and the
    # worker serving from threads of this process, a garbage collection triggered in
    # their threads mid-traffic finalized some half-way ("async generator already
    # executing", an unraisable warning in about half the runs). Collect once, here, with
    # this loop still running so that their finalizers close them on it.
    gc.disable()
    try:
        await asyncio.gather(*(one(i) for i in range(REQUESTS)))
        await client.close()
        gc.collect()
        for _ in range(3):
            await asyncio.sleep(0)
    finally:
        gc.enable()
    return seen


def _enclave_audit_verify(gateway: RunningGateway) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ENCLAVE_DATABASE_URL": gateway.settings.database_url,
        "ENCLAVE_DATA_DIR": str(gateway.settings.data_dir),
    }
    return subprocess.run(
        [sys.executable, "-m", "gateway", "audit", "verify"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def _sql(url: str, statement: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text(statement))
    finally:
        await engine.dispose()


def test_five_hundred_requests_five_hundred_records(postgres_gateway: RunningGateway) -> None:
    gateway = postgres_gateway
    seen = asyncio.run(_traffic(gateway, gateway.department("quality")))
    records = gateway.audit_records(wait_for=REQUESTS, timeout=60)
    assert len(records) == REQUESTS
    # The caller's X-Request-Id is kept beside the gateway's own (distinct) ids.
    by_id = {r["client_request_id"]: r for r in records}
    assert set(by_id) == set(seen)
    assert len({r["request_id"] for r in records}) == REQUESTS
    assert not set(seen) & {r["request_id"] for r in records}
    prompts = {}  # the same prompt's token count, from the kind that shows usage
    for i in range(0, REQUESTS, 4):
        prompts[i // 4] = seen[f"audit-{i}"]["prompt"]
    for i in range(REQUESTS):
        record, kind = by_id[f"audit-{i}"], i % 4
        if kind == 3:
            assert (record["status_code"], record["reason"]) == (499, "client_disconnected")
            assert record["streamed"]
            continue
        assert record["status_code"] == 200, record
        assert record["prompt_tokens"] == prompts[i // 4], record
        assert record["completion_tokens"] == seen[f"audit-{i}"]["completion"]
        assert record["department_slug"] == "quality"
    verified = _enclave_audit_verify(gateway)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    # The same chain holds the admin records of the set-up (admin, department, key).
    every = asyncio.run(read_records(gateway.settings.database_url, action=None))
    assert len(every) == REQUESTS + 3
    assert f"audit chain ok: {len(every)} records" in verified.stdout
    assert f"recorded head: seq {every[-1]['seq']} " in verified.stdout

    tampered = records[136]["seq"]
    statement = f"UPDATE request_records SET completion_tokens = 9 WHERE seq = {tampered}"
    asyncio.run(_sql(gateway.settings.database_url, statement))
    broken = _enclave_audit_verify(gateway)
    assert broken.returncode == 1
    assert f"seq {tampered}" in broken.stdout + broken.stderr
