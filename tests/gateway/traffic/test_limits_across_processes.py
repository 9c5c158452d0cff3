"""Two gateway processes share one Redis: a department's limit is one exact limit."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gateway import admin_tasks
from gateway.bench.fake_upstream import MODEL, FakeUpstream
from gateway.domain.proxy.body import parse
from gateway.settings import Settings
from tests.gateway.traffic.conftest import read_records, set_limits
from tests.gateway.traffic.processes import fake_worker, fresh_postgres, gateway_process

SECRET = "t" * 40
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 90}


@pytest.fixture(scope="module")
def two_gateways(
    database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[list[str], Settings, FakeUpstream]]:
    tmp_path = tmp_path_factory.mktemp("two-gateways")
    with (
        fake_worker(chunks=4) as (worker_url, upstream),
        fresh_postgres(database_url) as database,
    ):
        env = {
            "ENCLAVE_MODE": "production",
            "ENCLAVE_DATABASE_URL": database,
            "ENCLAVE_REDIS_URL": redis_url,
            "ENCLAVE_SECRET_KEY": SECRET,
            "ENCLAVE_WORKERS": worker_url,
            "ENCLAVE_WORKER_TOKEN": "fake",
            "ENCLAVE_LOG_LEVEL": "warning",
        }
        settings = Settings.from_env({**env, "ENCLAVE_DATA_DIR": str(tmp_path)})
        admin_tasks.migrate_database(settings)
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with gateway_process(env, tmp_path / "a") as a, gateway_process(env, tmp_path / "b") as b:
            yield [a, b], settings, upstream


def _department(settings: Settings, **limits: Any) -> tuple[str, str]:
    slug = f"dept-{uuid.uuid4().hex[:8]}"
    asyncio.run(admin_tasks.create_department(settings, slug, slug))
    asyncio.run(set_limits(settings, slug, **limits))
    return slug, str(asyncio.run(admin_tasks.create_key(settings, slug, "load", None, None)))


async def _burst(urls: list[str], key: str, count: int, upstream: FakeUpstream) -> Counter[int]:
    """``count`` requests at once, half to each gateway. The worker holds every admitted one
    until each request has been either refused or forwarded, so none settles mid-burst."""
    headers = {"authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=count)
    statuses: Counter[int] = Counter()
    release = upstream.release = threading.Event()
    forwarded_before = upstream.completions

    async def one(i: int, client: httpx.AsyncClient) -> None:
        response = await client.post(f"{urls[i % len(urls)]}/v1/chat/completions", json=BODY)
        statuses[response.status_code] += 1

    async def open_gate() -> None:
        while upstream.completions - forwarded_before + statuses[429] < count:
            await asyncio.sleep(0.01)
        release.set()

    async with httpx.AsyncClient(timeout=60, limits=limits, headers=headers) as client:
        await asyncio.gather(open_gate(), *(one(i, client) for i in range(count)))
    return statuses


def _wait_for_records(settings: Settings, slug: str, count: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        rows = asyncio.run(read_records(settings.database_url))
        if sum(r["department_slug"] == slug for r in rows) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} audit records for {slug}")


def test_requests_per_minute_is_exact_across_two_processes(
    two_gateways: tuple[list[str], Settings, FakeUpstream],
) -> None:
    urls, settings, upstream = two_gateways
    _, key = _department(settings, requests_per_minute=60)
    statuses = asyncio.run(_burst(urls, key, 200, upstream))
    assert statuses == {200: 60, 429: 140}


def test_tokens_per_minute_reserves_then_settles(
    two_gateways: tuple[list[str], Settings, FakeUpstream],
) -> None:
    urls, settings, upstream = two_gateways
    reserved = parse(
        "chat.completions", httpx.Request("POST", "/", json=BODY).read()
    ).reserved_tokens(None)
    budget = reserved * 10 + reserved // 2  # room for exactly 10 reservations
    slug, key = _department(settings, tokens_per_minute=budget)
    first = asyncio.run(_burst(urls, key, 40, upstream))
    assert first == {200: 10, 429: 30}
    # Each settled to its real usage (12 prompt + 4 completion tokens, as the fake worker
    # reports), giving the rest of its reservation back to the minute's budget.
    # Settlement runs just after a response's last byte; its audit record comes after it.
    _wait_for_records(settings, slug, 40)
    left = budget - 10 * 16
    second = asyncio.run(_burst(urls, key, 40, upstream))
    assert second[200] == left // reserved
    assert second[200] + second[429] == 40
