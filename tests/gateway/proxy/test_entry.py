"""The API's own way in (ahead of Litestar's router) keeps every step a request had."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
import structlog
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.bench.fake_upstream import MODEL
from gateway.domain.proxy.handlers import API_ROUTES
from gateway.logging import configure_logging
from tests.gateway.helpers import embedded_gateway
from tests.gateway.traffic.conftest import WORKER_TOKEN, read_records, set_limits
from tests.gateway.traffic.processes import fake_worker

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}


def _access_lines(stream: io.StringIO) -> list[dict[str, object]]:
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("event") == "request"]


def test_api_requests_keep_request_id_auth_limits_audit_and_the_log_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    try:
        with fake_worker() as (worker_url, upstream):
            gateway = embedded_gateway(tmp_path, workers=worker_url, worker_token=WORKER_TOKEN)
            settings = gateway.settings
            asyncio.run(admin_tasks.create_department(settings, "Quality", "quality"))
            asyncio.run(set_limits(settings, "quality", requests_per_minute=1, scheduling_weight=3))
            key = asyncio.run(admin_tasks.create_key(settings, "quality", "t", None, None))
            app = create_app(settings)
            auth = {"authorization": f"Bearer {key}"}
            with TestClient(app=app) as client:
                caller = {"x-request-id": "api-1", "traceparent": f"00-{TRACE}-00f067aa0ba902b7-01"}
                first = client.post("/v1/chat/completions", json=CHAT, headers={**auth, **caller})
                assert first.status_code == 200 and first.headers["x-client-request-id"] == "api-1"
                ours = first.headers["x-request-id"]
                assert ours.startswith("req-")
                head = upstream.last_head.decode().lower()  # the worker sees our id
                assert f"x-request-id: {ours}" in head and "x-enclave-tenant: quality" in head
                assert "x-enclave-tenant-weight: 3\r\n" in head  # the department's weight
                assert f"traceparent: 00-{TRACE}-" in head  # no exporter, the trace goes on
                assert first.headers["x-ratelimit-limit-requests"] == "1"
                assert "data: [DONE]" in first.text
                assert client.get("/v1/models", headers=auth).json()["data"][0]["id"] == MODEL
                refused = client.post("/v1/chat/completions", json=CHAT, headers=auth)
                assert refused.status_code == 429 and refused.headers["retry-after"]
                assert refused.json()["error"]["code"] == "rate_limit_exceeded"
                nobody = client.post("/v1/chat/completions", json=CHAT)
                assert nobody.status_code == 401 and nobody.json()["error"]["message"]
                assert nobody.headers["x-request-id"].startswith("req-")

                # A failure nothing in the handler expected: OpenAI's 500, still logged.
                def broken(*_args: object) -> None:
                    raise RuntimeError("boom")

                monkeypatch.setattr(app.state.traffic.pool, "pick", broken)
                failed = client.post(
                    "/v1/chat/completions", json=CHAT, headers={**auth, "x-request-id": "api-5"}
                )
                assert failed.status_code == 500
                assert failed.headers["x-client-request-id"] == "api-5"
                assert failed.json()["error"]["type"] == "api_error"
    finally:
        structlog.reset_defaults()
    records = asyncio.run(read_records(settings.effective_database_url))
    assert [(r["endpoint"], r["status_code"]) for r in records] == [
        ("chat.completions", 200),
        ("models", 200),
        ("chat.completions", 429),
        ("chat.completions", 401),
        ("chat.completions", 500),
    ]
    assert records[0]["request_id"] == ours and records[0]["client_request_id"] == "api-1"
    assert records[0]["completion_tokens"] == 4
    access = _access_lines(stream)
    assert [(line["path"], line["status"]) for line in access] == [
        ("/v1/chat/completions", 200),
        ("/v1/models", 200),
        ("/v1/chat/completions", 429),
        ("/v1/chat/completions", 401),
        ("/v1/chat/completions", 500),
    ]
    assert access[0]["request_id"] == ours and access[0]["client_request_id"] == "api-1"
    assert access[-1]["client_request_id"] == "api-5"
    assert key not in stream.getvalue()


def test_only_the_api_paths_skip_litestar(tmp_path: Path) -> None:
    assert set(API_ROUTES) == {"/v1/chat/completions", "/v1/completions", "/v1/models"}
    gateway = embedded_gateway(tmp_path)
    with TestClient(app=create_app(gateway.settings)) as client:
        # Litestar still serves the rest, with its own middleware and error shape.
        assert client.get("/api/me").status_code == 401
        assert client.get("/health").headers["x-request-id"].startswith("req-")
        assert client.get("/v1/nothing-here").status_code == 404
