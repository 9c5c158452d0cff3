"""The prefix warmer against recording fake workers: what it pins where, what it unpins, how
it reports failures, and that its pin lands on the worker the router sends the requests to."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway import admin_tasks
from gateway.db.engine import create_engine, session_factory
from gateway.domain.assistants.prompt import system_message
from gateway.domain.assistants.warming import PrefixWarmer
from gateway.domain.proxy.body import chat_affinity_key
from gateway.domain.workers.pool import NoUpstream, WorkerPool
from gateway.domain.workers.routing import rendezvous_score
from gateway.settings import Settings
from tests.gateway.assistants_proxy.support import (
    MODEL,
    TOKEN,
    RecordingWorker,
    add_assistant,
    archive,
    new_version,
    prompt_tokens,
    recording_worker,
    served_gateway,
)
from tests.gateway.helpers import embedded_gateway
from tests.gateway.postgres import fresh_postgres

ON_LOOP = pytest.mark.asyncio(loop_scope="session")


@pytest.fixture
def workers() -> Iterator[list[tuple[str, RecordingWorker]]]:
    with ExitStack() as stack:
        yield [stack.enter_context(recording_worker()) for _ in range(2)]


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Settings]:
    """A migrated database with one department, on each of the two databases."""
    with ExitStack() as stack:
        overrides = {}
        if request.param == "postgres":
            server = request.getfixturevalue("database_url")
            overrides["database_url"] = stack.enter_context(fresh_postgres(server))
        settings = embedded_gateway(tmp_path, **overrides).settings
        asyncio.run(admin_tasks.create_department(settings, "Quality", "quality"))
        yield settings


@pytest.fixture
async def warmer(
    settings: Settings, workers: list[tuple[str, RecordingWorker]]
) -> AsyncIterator[tuple[PrefixWarmer, WorkerPool]]:
    engine = create_engine(settings.effective_database_url)
    pool = WorkerPool([workers[0][0]], TOKEN, interval=60)
    warmer = PrefixWarmer(session_factory(engine), interval_s=60, retry_s=0.1)
    warmer.attach(pool, TOKEN)
    await pool.check_all()
    yield warmer, pool
    await warmer.close()
    await pool.close()
    await engine.dispose()


async def _until(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


@ON_LOOP
async def test_sync_pins_each_active_assistant_and_unpins_what_is_no_longer_wanted(
    settings: Settings,
    workers: list[tuple[str, RecordingWorker]],
    warmer: tuple[PrefixWarmer, WorkerPool],
) -> None:
    warm, _ = warmer
    url, worker = workers[0]
    template = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    desk = await add_assistant(
        settings, "quality", "qa-desk", "Check the batch.", response_template=template
    )
    other = await add_assistant(settings, "quality", "other-desk", "Be brief.", model=MODEL)
    await warm.sync()
    posted = worker.prefix_calls("POST")
    expected = {"messages": [system_message("Check the batch.", template)], "model": MODEL}
    assert expected in posted and len(posted) == 2
    status = warm.status(desk)
    assert status is not None and status.state == "warm" and status.version == 1
    assert status.worker == url and status.num_tokens and status.error is None
    assert (await prompt_tokens(settings, desk)) == {1: status.num_tokens}  # stored once
    assert len(worker.pins) == 2

    await new_version(settings, desk, "Check the batch twice.")
    await archive(settings, other)
    await warm.sync()
    assert warm.status(other) is None
    status = warm.status(desk)
    assert status is not None and (status.state, status.version) == ("warm", 2)
    assert sorted(worker.pins.values()) == [
        system_message("Check the batch twice.", template)["content"]
    ]
    assert len(worker.prefix_calls("DELETE")) == 2  # version 1 and the archived one
    await warm.sync()  # nothing changed: nothing more unpinned
    assert len(worker.prefix_calls("DELETE")) == 2


@ON_LOOP
async def test_a_full_worker_is_a_failed_status_with_its_reason(
    settings: Settings,
    workers: list[tuple[str, RecordingWorker]],
    warmer: tuple[PrefixWarmer, WorkerPool],
) -> None:
    warm, _ = warmer
    workers[0][1].cap = 0
    desk = await add_assistant(settings, "quality", "qa-desk", "Check the batch.")
    await warm.sync()  # no exception out of it
    status = warm.status(desk)
    assert status is not None and status.state == "failed" and status.worker is None
    assert status.error is not None and "409 pin_capacity_exceeded" in status.error
    assert (await prompt_tokens(settings, desk)) == {1: None}


@ON_LOOP
async def test_a_worker_that_comes_back_healthy_is_warmed_again(
    settings: Settings,
    workers: list[tuple[str, RecordingWorker]],
    warmer: tuple[PrefixWarmer, WorkerPool],
) -> None:
    warm, pool = warmer
    worker = workers[0][1]
    desk = await add_assistant(settings, "quality", "qa-desk", "Check the batch.")
    await warm.start()  # the gateway's start: a first sync
    await _until(lambda: len(worker.prefix_calls("POST")) == 1)
    worker.ready = False
    await pool.check_all()
    worker.pins.clear()  # it restarted: its cache is empty
    worker.ready = True
    await pool.check_all()  # healthy again: a sync is requested
    await _until(lambda: len(worker.prefix_calls("POST")) == 2)
    await _until(lambda: bool(worker.pins))
    status = warm.status(desk)
    assert status is not None and status.state == "warm"


@ON_LOOP
async def test_a_worker_that_comes_up_takes_requests_once_its_assistants_are_pinned(
    settings: Settings,
    workers: list[tuple[str, RecordingWorker]],
    warmer: tuple[PrefixWarmer, WorkerPool],
) -> None:
    warm, pool = warmer
    (upstream,) = pool.upstreams
    worker = workers[0][1]
    # The fixture's first check found the worker after the warmer was attached: held.
    assert upstream.healthy and upstream.warming and pool.models() == []
    with pytest.raises(NoUpstream):
        pool.pick(MODEL, None)
    desk = await add_assistant(settings, "quality", "qa-desk", "Check the batch.")
    await warm.sync()
    assert len(worker.prefix_calls("POST")) == 1  # pinned on it while it was held
    status = warm.status(desk)
    assert status is not None and status.state == "warm" and status.worker == upstream.url
    assert not upstream.warming and pool.models() == [MODEL]
    assert pool.pick(MODEL, None) is upstream


def _id(value: object) -> uuid.UUID:
    assert isinstance(value, uuid.UUID)
    return value


def test_the_pin_lands_on_the_worker_the_router_sends_the_assistants_requests_to(
    tmp_path: Path, workers: list[tuple[str, RecordingWorker]]
) -> None:
    urls = [url for url, _ in workers]
    prompts = _three_preferring_each(urls)
    with served_gateway(tmp_path, urls) as gateway:
        key = gateway.key("quality")
        warm: PrefixWarmer = gateway.app.state.gateway.warmer
        ids = [
            _id(asyncio.run(add_assistant(gateway.settings, "quality", f"desk-{i}", prompt)))
            for i, prompt in enumerate(prompts)
        ]
        warm.request_sync()
        deadline = time.monotonic() + 15
        while not all((s := warm.status(i)) is not None and s.state == "warm" for i in ids):
            assert time.monotonic() < deadline, [warm.status(i) for i in ids]
            time.sleep(0.05)
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
        served = set()
        for i, assistant_id in enumerate(ids):
            client.chat.completions.create(
                model=f"desk-{i}", messages=[{"role": "user", "content": "hi"}]
            )
            (answered,) = [url for url, w in workers if w.chats and w.chats.pop()]
            status = warm.status(assistant_id)
            assert status is not None and status.worker == answered
            served.add(answered)
        assert served == set(urls)  # both workers take some (else this proves little)


def _three_preferring_each(urls: list[str]) -> list[str]:
    """Six system prompts, three whose key ranks each worker first. Where a key lands
    follows the workers' ports, new each run: six made-up prompts all went to one worker
    once in 32 runs, and the test then proved nothing (it failed, rightly)."""
    chosen: dict[str, list[str]] = {url: [] for url in urls}
    n = 0
    while any(len(p) < 3 for p in chosen.values()):
        prompt = f"Desk {n}."
        key = chat_affinity_key([system_message(prompt, None)])
        first = max(urls, key=lambda url: rendezvous_score(key, url))
        if len(chosen[first]) < 3:
            chosen[first].append(prompt)
        n += 1
    return [p for pair in zip(*chosen.values(), strict=True) for p in pair]


def test_an_admin_write_resyncs_after_its_commit_and_applies_here_at_once(
    tmp_path: Path, workers: list[tuple[str, RecordingWorker]]
) -> None:
    url, worker = workers[0]
    with served_gateway(tmp_path, [url]) as gateway:
        key = gateway.key("quality")
        warm: PrefixWarmer = gateway.app.state.gateway.warmer
        desk = _id(asyncio.run(add_assistant(gateway.settings, "quality", "qa-desk", "One.")))
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
        messages: Any = [{"role": "user", "content": "hi"}]
        first = client.chat.completions.with_raw_response.create(model="qa-desk", messages=messages)
        assert first.headers["x-enclave-assistant"] == "qa-desk; version=1"
        asyncio.run(new_version(gateway.settings, desk, "Two."))
        with httpx.Client(base_url=gateway.url, timeout=30) as admin:
            login = admin.post(
                "/auth/local/login",
                json={"email": "root@example.test", "password": gateway.admin_password},
            )
            csrf = {"x-csrf-token": login.json()["csrf_token"]}
            departments = admin.get("/api/admin/departments").json()["items"]
            (quality,) = [d for d in departments if d["slug"] == "quality"]
            renamed = admin.patch(
                f"/api/admin/departments/{quality['id']}", json={"name": "QA"}, headers=csrf
            )
            assert renamed.status_code == 200, renamed.text
        # Within the cache's 5 s, yet already the new version: the write invalidated it.
        again = client.chat.completions.with_raw_response.create(model="qa-desk", messages=messages)
        assert again.headers["x-enclave-assistant"] == "qa-desk; version=2"
        deadline = time.monotonic() + 10
        while (
            (status := warm.status(desk)) is None or status.version != 2 or status.state != "warm"
        ):
            assert time.monotonic() < deadline, status
            time.sleep(0.05)
        assert list(worker.pins.values()) == [system_message("Two.", None)["content"]]
