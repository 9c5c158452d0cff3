"""GET /api/me/usage: the caller's department's token quotas, used and remaining."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from litestar.testing import TestClient
from redis.asyncio import Redis

from gateway.app import create_app
from gateway.bench.fake_upstream import MODEL
from gateway.domain.limits.redis_limiter import RedisLimiter
from gateway.domain.proxy.traffic import Traffic
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in

CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def _usage(client: TestClient, **headers: str) -> dict[str, Any]:
    reply = client.get("/api/me/usage", headers=headers)
    assert reply.status_code == 200, reply.text
    return dict(reply.json())


def _next_midnight() -> datetime:
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=1)


def test_usage_counts_the_departments_tokens(tmp_path: Path, fake_worker: str) -> None:
    gateway = embedded_gateway(tmp_path, workers=fake_worker, default_department="ops")
    with TestClient(app=create_app(gateway.settings)) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        writes = {"x-csrf-token": csrf}
        ops = {"name": "Ops", "slug": "ops", "daily_token_quota": 1000}
        department = client.post("/api/admin/departments", json=ops, headers=writes).json()
        fresh = _usage(client)
        assert fresh["department"] == "ops"
        assert fresh["day"]["limit"] == 1000 and fresh["day"]["used"] == 0
        assert fresh["day"]["remaining"] == 1000
        assert datetime.fromisoformat(fresh["day"]["resets_at"]) == _next_midnight()
        assert fresh["month"]["limit"] is None and fresh["month"]["remaining"] is None
        assert datetime.fromisoformat(fresh["month"]["resets_at"]).day == 1

        chat = client.post("/v1/chat/completions", json=CHAT, headers=writes)
        assert chat.status_code == 200, chat.text
        spent = chat.json()["usage"]["total_tokens"]
        deadline = time.monotonic() + 5  # settled as the response ends, just after
        while (used := _usage(client))["day"]["used"] != spent and time.monotonic() < deadline:
            time.sleep(0.02)
        assert used["day"] == {**fresh["day"], "used": spent, "remaining": 1000 - spent}
        assert used["month"]["used"] == spent

        # A key of the department reads the same department's counters.
        created = client.post(
            "/api/admin/keys", json={"department_id": department["id"], "name": "k"}, headers=writes
        ).json()
        client.cookies.clear()
        by_key = _usage(client, authorization=f"Bearer {created['key']}")
        assert by_key["department"] == "ops" and by_key["day"]["used"] == spent
        assert client.get("/api/me/usage").status_code == 401  # neither session nor key
        assert client.get("/api/me/usage", headers={"authorization": "Bearer x"}).status_code == 401


def test_a_user_in_no_department_has_no_quota(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    with TestClient(app=create_app(gateway.settings)) as client:
        sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        usage = _usage(client)
        assert usage["department"] is None
        for period in ("day", "month"):
            assert {k: usage[period][k] for k in ("limit", "used", "remaining")} == {
                "limit": None,
                "used": 0,
                "remaining": None,
            }
        # /api/me no longer pretends to know what is left: that is /api/me/usage's.
        assert "remaining_monthly_tokens" not in client.get("/api/me").json()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_limits_store_is_a_503(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path, default_department="ops")
    app = create_app(gateway.settings)
    with TestClient(app=app) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        ops = {"name": "Ops", "slug": "ops"}
        client.post("/api/admin/departments", json=ops, headers={"x-csrf-token": csrf})
        traffic: Traffic = app.state.traffic
        down = Redis.from_url(f"redis://127.0.0.1:{_closed_port()}/0")
        traffic.limiter = RedisLimiter(down, timeout_s=0.5)
        reply = client.get("/api/me/usage")
        assert reply.status_code == 503, reply.text
        assert "Redis" in reply.json()["detail"] and "unreachable" in reply.json()["detail"]
        assert client.get("/api/me").status_code == 200  # who-am-I does not need Redis
