"""GET /api/status: the caller's models and whether each can answer now."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway.app import create_app
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.workers.pool import WorkerPool
from gateway.domain.workers.status import ModelStatus, StatusRead, model_status
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in
from tests.gateway.workers.conftest import TOKEN, StubWorker


def _until(read: Callable[[], dict[str, Any]], want: Callable[[dict[str, Any]], bool]) -> Any:
    deadline = time.monotonic() + 5
    while not want(found := read()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return found


def test_models_go_from_starting_to_ready_to_loading_to_unavailable(tmp_path: Path) -> None:
    stub = StubWorker(["tiny", "other"])
    stub.ready_status = 503  # {"status": "loading"}, as a worker loading its model says
    stub.start()
    settings = dict(workers=stub.url, worker_token=TOKEN, health_interval_ms=100)
    gateway = embedded_gateway(tmp_path, default_department="ops", **settings)
    app = create_app(gateway.settings)
    try:
        with TestClient(app=app) as client:
            csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
            ops = {"name": "Ops", "slug": "ops", "allowed_models": ["tiny"]}
            client.post("/api/admin/departments", json=ops, headers={"x-csrf-token": csrf})

            def status() -> dict[str, Any]:
                reply = client.get("/api/status")
                assert reply.status_code == 200, reply.text
                return dict(reply.json())

            # No worker has listed a model yet: starting, not "no models exist".
            assert status() == {"starting": True, "models": []}
            stub.ready_status = 200
            # Listed at the first passing check, but held ("loading") until the assistant
            # warmer's sync releases it: wait for the release, which a busy machine delays.
            ready = _until(
                status, lambda s: bool(s["models"]) and s["models"][0]["state"] == "ready"
            )
            # "other" is not on the department's allow-list: not shown, as in /v1/models.
            assert ready == {
                "starting": False,
                "models": [{"id": "tiny", "state": "ready", "in_flight": 0}],
            }
            stub.ready_status = 503
            loading = _until(status, lambda s: s["models"][0]["state"] != "ready")
            assert loading["models"] == [{"id": "tiny", "state": "loading", "in_flight": 0}]
            traffic: Traffic = app.state.traffic
            assert [u.state for u in traffic.pool.upstreams] == ["loading"]
            stub.stop()
            gone = _until(status, lambda s: s["models"][0]["state"] != "loading")
            assert gone["models"] == [{"id": "tiny", "state": "unavailable", "in_flight": 0}]
            assert [u.state for u in traffic.pool.upstreams] == ["unreachable"]
            client.cookies.clear()
            assert client.get("/api/status").status_code == 401
    finally:
        stub.stop()


def test_a_user_in_no_department_sees_no_models(tmp_path: Path) -> None:
    stub = StubWorker(["tiny"])
    stub.start()
    gateway = embedded_gateway(tmp_path, workers=stub.url, worker_token=TOKEN)
    try:
        with TestClient(app=create_app(gateway.settings)) as client:
            sign_in(client, ADMIN_EMAIL, gateway.admin_password)
            assert client.get("/api/status").json() == {"starting": False, "models": []}
    finally:
        stub.stop()


@pytest.mark.asyncio(loop_scope="session")
async def test_in_flight_sums_the_workers_listing_the_model(stubs: list[StubWorker]) -> None:
    pool = WorkerPool([s.url for s in stubs], TOKEN, interval=60)  # two "tiny", one "other"
    try:
        await pool.check_all()
        for upstream, running in zip(pool.upstreams, (2, 3, 4), strict=True):
            upstream.in_flight = running
        assert model_status(pool, lambda _: True) == StatusRead(
            starting=False,
            models=[ModelStatus("other", "ready", 4), ModelStatus("tiny", "ready", 5)],
        )
        stubs[2].ready_status = 503
        await pool.check_all()
        only_other = model_status(pool, lambda model: model == "other")
        assert only_other.models == [ModelStatus("other", "loading", 4)]
    finally:
        await pool.close()
