from __future__ import annotations

import io
import json
import logging

import structlog
from litestar.testing import TestClient

from gateway import __version__
from gateway.app import create_app
from gateway.logging import configure_logging
from gateway.settings import Settings


def test_health_answers_ok() -> None:
    with TestClient(app=create_app(Settings())) as client:
        response = client.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok", "version": __version__}


def test_request_id_is_always_ours_and_the_callers_is_echoed_apart() -> None:
    with TestClient(app=create_app(Settings())) as client:
        echoed = client.get("/health", headers={"X-Request-Id": "abc-123"})
        generated = client.get("/health")
        hostile = client.get("/health", headers={"X-Request-Id": "bad id\nwith newline"})
    assert echoed.headers["x-request-id"].startswith("req-")
    assert echoed.headers["x-client-request-id"] == "abc-123"
    assert generated.headers["x-request-id"].startswith("req-")
    assert "x-client-request-id" not in generated.headers
    assert hostile.headers["x-request-id"].startswith("req-")
    assert "x-client-request-id" not in hostile.headers
    assert len({r.headers["x-request-id"] for r in (echoed, generated, hostile)}) == 3


def test_access_line_is_json_with_request_id_and_no_secrets() -> None:
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    try:
        with TestClient(app=create_app(Settings())) as client:
            client.get(
                "/health",
                headers={"X-Request-Id": "rid-1", "Authorization": "Bearer sk-enc-secret"},
            )
        structlog.get_logger("t").info("probe", authorization="Bearer x", api_key="k")
    finally:
        structlog.reset_defaults()
    lines = [json.loads(line) for line in stream.getvalue().splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("event") == "request"]
    assert access and access[0]["client_request_id"] == "rid-1"
    assert access[0]["request_id"].startswith("req-")
    assert access[0]["path"] == "/health" and access[0]["status"] == 200
    probe = next(line for line in lines if line.get("event") == "probe")
    assert probe["authorization"] == "[redacted]" and probe["api_key"] == "[redacted]"
    assert "sk-enc-secret" not in stream.getvalue()


def test_http_clients_log_each_request_only_at_debug_level() -> None:
    """The worker health checks (every two seconds) stay off an operator's screen."""
    try:
        configure_logging("info", "json", stream=io.StringIO())
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)
        assert logging.getLogger("httpx").isEnabledFor(logging.WARNING)
        configure_logging("debug", "json", stream=io.StringIO())
        assert logging.getLogger("httpx").isEnabledFor(logging.INFO)
    finally:
        structlog.reset_defaults()
        logging.getLogger("httpx").setLevel(logging.NOTSET)
        logging.getLogger("httpcore").setLevel(logging.NOTSET)
