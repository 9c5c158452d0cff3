"""`/api/admin/workers`: each worker of the pool with its own load, and drain and restart
of the one the gateway runs itself (a real supervised worker on a tiny model)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.workers import load
from gateway.domain.workers.pool import NoUpstream
from gateway.domain.workers.supervisor import WorkerSupervisor
from gateway.domain.workers.worker_token import embedded_worker_token
from tests.gateway.admin.conftest import MEMBER_EMAIL, Console
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in
from tests.gateway.traffic.conftest import read_records
from tests.gateway.workers.conftest import TOKEN, StubWorker
from tests.gateway.workers.test_supervisor import TINY_ARGS
from tests.gateway.workers.test_worker_load import SAMPLE
from tests.inference.server.conftest import free_port


def until(read: Callable[[], Any], want: Callable[[Any], bool], timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while not want(found := read()):
        assert time.monotonic() < deadline, f"not in time; last: {found}"
        time.sleep(0.1)
    return found


def admin_records(console: Console, prefix: str) -> list[dict[str, Any]]:
    console.client.blocking_portal.call(console.client.app.state.gateway.audit.flush)
    url = console.gateway.settings.effective_database_url
    return [r for r in asyncio.run(read_records(url, None)) if r["action"].startswith(prefix)]


@pytest.fixture
def stubs() -> Iterator[list[StubWorker]]:
    first, second = StubWorker(["tiny"]), StubWorker(["other"])
    first.metrics_text = SAMPLE
    for stub in (first, second):
        stub.start()
    yield [first, second]
    for stub in (first, second):
        stub.stop()


@pytest.fixture
def by_url(tmp_path: Path, stubs: list[StubWorker]) -> Iterator[Console]:
    """A gateway whose workers are configured by URL (it runs none itself)."""
    urls = ",".join(s.url for s in stubs)
    gateway = embedded_gateway(tmp_path, workers=urls, worker_token=TOKEN, health_interval_ms=100)
    password = asyncio.run(admin_tasks.create_admin(gateway.settings, MEMBER_EMAIL))
    with TestClient(app=create_app(gateway.settings)) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        yield Console(gateway, client, csrf, password)


def test_each_worker_with_its_pool_state_and_its_own_load(
    by_url: Console, stubs: list[StubWorker], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "MIN_WINDOW_S", 0.0)
    reply = by_url.client.get("/api/admin/workers")
    assert reply.status_code == 200, reply.text
    first, second = reply.json()["workers"]
    assert first["index"] == 0 and first["url"] == stubs[0].url
    assert (first["healthy"], first["state"], first["models"]) == (True, "ready", ["tiny"])
    assert first["max_model_len"] == {"tiny": 2048}
    assert (first["supervised"], first["draining"], first["restarting"]) == (False, False, False)
    assert first["in_flight"] == 0 and first["crash_restarts"] is None
    assert first["load_error"] == ""
    assert {k: v for k, v in first["load"].items() if k != "scraped_at"} == {
        "requests_waiting": 0,
        "requests_running": 0,
        "kv_cache_usage": 0.0,
        "generation_tokens_per_s": None,  # the first scrape: nothing to compare with
        "prefix_cache_hit_rate": pytest.approx(416 / 636),
    }
    # The stub has no /metrics: its pool state, and no load.
    assert second["models"] == ["other"] and second["load"] is None
    assert second["load_error"] == "/metrics answered 404"

    stubs[0].metrics_text = SAMPLE.replace(
        'generation_tokens_total{model="tiny",tenant="legal"} 8.0',
        'generation_tokens_total{model="tiny",tenant="legal"} 1008.0',
    )
    stubs[1].stop()
    later = by_url.client.get("/api/admin/workers").json()["workers"]
    assert later[0]["load"]["generation_tokens_per_s"] > 0
    down = until(
        lambda: by_url.client.get("/api/admin/workers").json()["workers"][1],
        lambda w: not w["healthy"],
    )
    assert down["load"] is None and down["load_error"].startswith("/metrics did not answer")
    assert down["last_error"] and down["models"] == ["other"]  # what it served is kept


def test_drain_and_restart_refuse_a_worker_the_gateway_does_not_run(by_url: Console) -> None:
    for action in ("drain", "restart"):
        reply = by_url.client.post(f"/api/admin/workers/0/{action}", headers=by_url.writes)
        assert reply.status_code == 409, reply.text
        assert "does not run this worker" in reply.json()["detail"]
        for index in ("2", "-1", "99999999999999999999"):
            path = f"/api/admin/workers/{index}/{action}"
            missing = by_url.client.post(path, headers=by_url.writes)
            assert missing.status_code in (400, 404), (path, missing.text)
        bad = by_url.client.post(f"/api/admin/workers/x/{action}", headers=by_url.writes)
        assert bad.status_code in (400, 404, 405), bad.text
    assert admin_records(by_url, "worker.") == []  # refused: nothing was done


def test_members_and_api_keys_are_refused(by_url: Console) -> None:
    by_url.refused_to_others("GET", "/api/admin/workers")
    by_url.refused_to_others("POST", "/api/admin/workers/0/drain")
    by_url.refused_to_others("POST", "/api/admin/workers/0/restart")


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.inference.checkpoints import make_checkpoint

    return make_checkpoint("llama", tmp_path_factory.mktemp("admin-workers-llama"))


@pytest.fixture
def supervised(tmp_path: Path, tiny_checkpoint: Path) -> Iterator[Console]:
    """The embedded default: the gateway runs its worker (a tiny model) itself."""
    gateway = embedded_gateway(tmp_path, health_interval_ms=100)
    supervisor = WorkerSupervisor(
        tiny_checkpoint, free_port(), embedded_worker_token(gateway.settings),
        served_name="tiny", log_dir=tmp_path, extra_args=TINY_ARGS,
    )  # fmt: skip
    supervisor.min_backoff_s = 0.2
    password = asyncio.run(admin_tasks.create_admin(gateway.settings, MEMBER_EMAIL))
    with TestClient(app=create_app(gateway.settings, supervisor=supervisor)) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        yield Console(gateway, client, csrf, password)


def test_drain_then_restart_the_supervised_worker(supervised: Console) -> None:
    client, writes = supervised.client, supervised.writes
    supervisor = client.app.state.traffic.supervisor

    def worker() -> dict[str, Any]:
        reply = client.get("/api/admin/workers")
        assert reply.status_code == 200, reply.text
        [only] = reply.json()["workers"]
        return dict(only)

    ready = until(worker, lambda w: w["healthy"])
    assert ready["supervised"] and ready["crash_restarts"] == 0 and ready["load"] is not None
    early_restarts = []
    if supervisor.starting:
        # The pool's health check can see the worker answer a moment before the
        # supervisor's own readiness check returns; until then a restart is refused.
        early = client.post("/api/admin/workers/0/restart", headers=writes)
        if early.status_code == 202:  # the start ended between the check and the call
            early_restarts.append(("worker.restart", supervisor.url, 202))
            until(worker, lambda w: not w["restarting"] and w["healthy"], timeout=90)
        else:
            assert early.status_code == 409 and "still starting" in early.json()["detail"]
    until(lambda: supervisor.running, bool)
    first_pid = supervisor.pid

    drained = client.post("/api/admin/workers/0/drain", headers=writes)
    assert drained.status_code == 200 and drained.json()["draining"] is True, drained.text
    # Out of routing: the model is not offered while it drains, however healthy it is.
    pool = client.app.state.traffic.pool
    assert worker()["healthy"] and pool.models() == []
    with pytest.raises(NoUpstream):
        pool.pick("tiny", None)

    restarted = client.post("/api/admin/workers/0/restart", headers=writes)
    assert restarted.status_code == 202, restarted.text
    assert restarted.json()["restarting"] is True
    again = client.post("/api/admin/workers/0/restart", headers=writes)
    assert again.status_code == 409 and "already restarting" in again.json()["detail"]

    back = until(worker, lambda w: not w["restarting"] and w["healthy"], timeout=90)
    assert back["draining"] is False and back["state"] == "ready"
    assert supervisor.pid not in (None, first_pid)
    assert back["crash_restarts"] == 0  # an admin's restart is not a crash
    assert pool.models() == ["tiny"]

    records = admin_records(supervised, "worker.")
    assert [(r["action"], r["target_id"], r["status_code"]) for r in records] == [
        *early_restarts,
        ("worker.drain", supervisor.url, 200),
        ("worker.restart", supervisor.url, 202),
    ]
    records = records[len(early_restarts) :]
    assert json.loads(records[0]["details"]) == {
        "before": {"draining": False},
        "after": {"draining": True},
    }
    assert records[0]["user_email"] == ADMIN_EMAIL


def test_restart_refuses_an_embedded_worker_that_never_started(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    missing = WorkerSupervisor(
        tmp_path / "no-such-model", free_port(), embedded_worker_token(gateway.settings),
        log_dir=tmp_path,
    )  # fmt: skip
    with TestClient(app=create_app(gateway.settings, supervisor=missing)) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        [only] = client.get("/api/admin/workers").json()["workers"]
        assert only["supervised"] and not only["healthy"] and only["load"] is None
        reply = client.post("/api/admin/workers/0/restart", headers={"x-csrf-token": csrf})
        assert reply.status_code == 409 and "not running" in reply.json()["detail"], reply.text
