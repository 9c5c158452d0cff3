"""The assistants' cache on the request path: no query while fresh, a re-read after, the
database's outage (a served model never asks; a stale listing within the grace), and the
pool's healthy hook and the one affinity-key function the warmer shares with the proxy."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway import admin_tasks
from gateway.db.engine import create_engine, session_factory
from gateway.domain.assistants.cache import AssistantCache, AssistantsUnavailable
from gateway.domain.assistants.prompt import system_message
from gateway.domain.assistants.resolve import resolve
from gateway.domain.departments.service import DepartmentService
from gateway.domain.identity.principal import Principal
from gateway.domain.identity.snapshots import DepartmentSnapshot
from gateway.domain.limits.types import Limits
from gateway.domain.proxy.body import chat_affinity_key, parse
from gateway.domain.proxy.openai_errors import ApiError
from gateway.domain.workers.pool import Upstream, WorkerPool
from gateway.settings import Settings
from tests.gateway.assistants_proxy.support import (
    MODEL,
    TOKEN,
    add_assistant,
    archive,
    recording_worker,
)
from tests.gateway.helpers import embedded_gateway
from tests.gateway.postgres import fresh_postgres

ON_LOOP = pytest.mark.asyncio(loop_scope="session")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Switch:
    """A session factory that can be pointed at a database that is down."""

    def __init__(
        self, good: async_sessionmaker[AsyncSession], bad: async_sessionmaker[AsyncSession]
    ):
        self.good, self.bad, self.down = good, bad, False

    def __call__(self) -> AsyncSession:
        return (self.bad if self.down else self.good)()


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    with contextlib.ExitStack() as stack:
        overrides = {}
        if request.param == "postgres":
            server = request.getfixturevalue("database_url")
            overrides["database_url"] = stack.enter_context(fresh_postgres(server))
        settings = embedded_gateway(tmp_path, **overrides).settings
        asyncio.run(admin_tasks.create_department(settings, "Quality", "quality"))
        asyncio.run(add_assistant(settings, "quality", "qa-desk", "Check the batch."))
        yield settings


@pytest.fixture
async def databases(settings: Settings, tmp_path: Path) -> AsyncIterator[Switch]:
    good = create_engine(settings.effective_database_url)
    bad = create_engine(f"sqlite+aiosqlite:///{tmp_path}/no/such/dir/x.db")
    yield Switch(session_factory(good), session_factory(bad))
    await good.dispose()
    await bad.dispose()


async def _department(settings: Settings) -> uuid.UUID:
    async with admin_tasks.transaction(settings) as db:
        return (await DepartmentService(db).by_slug("quality")).id


def _principal(department_id: uuid.UUID) -> Principal:
    snapshot = DepartmentSnapshot(department_id, "quality", "Quality", Limits(), None)
    return Principal(department=snapshot)


@ON_LOOP
async def test_a_fresh_listing_costs_no_query_and_an_edit_shows_after_it(
    settings: Settings, databases: Switch
) -> None:
    clock = Clock()
    cache = AssistantCache(databases, fresh_s=5.0, clock=clock)  # type: ignore[arg-type]
    department = await _department(settings)
    first = await cache.of_department(department)
    assert first["qa-desk"].version == 1
    assert first["qa-desk"].system_text == system_message("Check the batch.", None)["content"]
    await asyncio.gather(*(cache.of_department(department) for _ in range(20)))
    assert cache.loads == 1  # fresh: no query, the unknown slug's answer included
    assert "no-such-desk" not in await cache.of_department(department)
    assert cache.loads == 1
    await archive(settings, first["qa-desk"].assistant_id)
    clock.now = 4.9
    assert "qa-desk" in await cache.of_department(department)  # within FRESH_S: as it was
    clock.now = 5.0
    assert await cache.of_department(department) == {}  # re-read: archived
    assert cache.loads == 2


class Slow:
    """A session factory whose sessions open a while after they are asked for."""

    def __init__(self, factory: async_sessionmaker[AsyncSession]) -> None:
        self.factory = factory

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[AsyncSession]:
        await asyncio.sleep(0.3)
        async with self.factory() as session:
            yield session


@ON_LOOP
async def test_a_request_that_leaves_mid_load_does_not_strand_the_others(
    settings: Settings, databases: Switch
) -> None:
    cache = AssistantCache(Slow(databases.good))  # type: ignore[arg-type]
    department = await _department(settings)
    leaving = asyncio.create_task(cache.of_department(department))
    staying = asyncio.create_task(cache.of_department(department))
    await asyncio.sleep(0.1)
    leaving.cancel()  # its client left while the one query runs
    assert "qa-desk" in await asyncio.wait_for(staying, 5)
    assert cache.loads == 1 and "qa-desk" in await cache.of_department(department)
    assert cache.loads == 1  # the load was kept, though the request that began it left


@ON_LOOP
async def test_an_outage_fails_only_requests_that_might_name_an_assistant(
    settings: Settings, databases: Switch
) -> None:
    clock = Clock()
    cache = AssistantCache(databases, outage_grace_s=60, clock=clock)  # type: ignore[arg-type]
    principal = _principal(await _department(settings))
    with recording_worker() as (url, _):
        pool = WorkerPool([url], TOKEN, interval=60)
        await pool.check_all()
        try:
            databases.down = True
            # A served model is never looked up: the outage cannot touch it.
            assert await resolve(cache, pool, principal, MODEL) is None
            assert cache.loads == 0
            with pytest.raises(ApiError) as unavailable:
                await resolve(cache, pool, principal, "qa-desk")
            assert unavailable.value.status == 503
            assert unavailable.value.reason == "database_unavailable"
            databases.down = False
            found = await resolve(cache, pool, principal, "qa-desk")
            assert found is not None and found.slug == "qa-desk"
            databases.down = True
            clock.now = 30.0  # stale, but within the grace: still answered
            assert await resolve(cache, pool, principal, "qa-desk") == found
            clock.now = 61.0
            with pytest.raises(AssistantsUnavailable):
                await cache.of_department(principal.department.id)  # type: ignore[union-attr]
        finally:
            await pool.close()


@ON_LOOP
async def test_healthy_callbacks_run_on_each_transition_only() -> None:
    with recording_worker() as (url, worker):
        pool = WorkerPool([url], TOKEN, interval=60)
        seen: list[str] = []

        def broken(upstream: Upstream) -> None:
            raise RuntimeError("a listener's bug")

        pool.on_healthy(broken)  # logged; the others still run
        pool.on_healthy(lambda upstream: seen.append(upstream.url))
        try:
            await pool.check_all()
            await pool.check_all()
            assert seen == [url]  # up once: one call, not one per check
            worker.ready = False
            await pool.check_all()
            worker.ready = True
            await pool.check_all()
            assert seen == [url, url]
            pool.mark_restarting(pool.upstreams[0])
            assert pool.upstreams[0].state == "loading" and not pool.upstreams[0].healthy
            await pool.check_all()
            assert seen == [url, url, url]  # an admin's restart comes back through it
        finally:
            await pool.close()


def test_the_warmer_and_the_proxy_compute_the_same_affinity_key() -> None:
    system = system_message("Check the batch.", {"type": "object", "properties": {}})
    body: dict[str, Any] = {"model": MODEL, "messages": [system, {"role": "user", "content": "x"}]}
    request = parse("chat.completions", msgspec.json.encode(body))
    assert request.affinity_key() == chat_affinity_key([system])
    other = parse(
        "chat.completions",
        msgspec.json.encode({**body, "messages": [{"role": "user", "content": "x"}]}),
    )
    assert other.affinity_key() != chat_affinity_key([system])
