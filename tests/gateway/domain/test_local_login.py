"""The break-glass login: JSON only, throttled, one argon2 run off the event loop either way."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from pathlib import Path

import httpx
from litestar.testing import TestClient

from gateway.app import create_app
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway
from tests.gateway.traffic.conftest import read_records
from tests.inference.server.conftest import serving

LOGIN = "/auth/local/login"


def test_only_json_bodies_are_accepted(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    credentials = f'{{"email": "{ADMIN_EMAIL}", "password": "{gateway.admin_password}"}}'
    with TestClient(app=create_app(gateway.settings)) as client:
        # No IdP configured: the web app shows only this form.
        assert client.get("/auth/methods").json() == {"sso": False, "local": True}
        # What a cross-site <form enctype="text/plain"> sends: valid JSON, wrong type.
        plain = client.post(LOGIN, content=credentials, headers={"content-type": "text/plain"})
        form = client.post(LOGIN, data={"email": ADMIN_EMAIL, "password": gateway.admin_password})
        for refused in (plain, form):
            assert refused.status_code == 415, refused.text
            assert "application/json" in refused.json()["detail"]
            assert "set-cookie" not in refused.headers
        assert client.get("/api/me").status_code == 401
        ok = client.post(LOGIN, content=credentials, headers={"content-type": "application/json"})
        assert ok.status_code == 200 and "set-cookie" in ok.headers


def test_failed_logins_are_throttled_per_account_and_per_address(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path, login_max_failures_per_address=8)
    right = {"email": ADMIN_EMAIL, "password": gateway.admin_password}
    wrong = {"email": ADMIN_EMAIL, "password": "guess"}
    with TestClient(app=create_app(gateway.settings)) as client:
        assert [client.post(LOGIN, json=wrong).status_code for _ in range(5)] == [401] * 5
        locked = client.post(LOGIN, json=right)  # the right password, too late
        assert locked.status_code == 429 and "too many" in locked.json()["detail"]
        assert 1 <= int(locked.headers["retry-after"]) <= 900
        assert "set-cookie" not in locked.headers
        # The same address, other accounts: 6 failures so far, the limit is 8.
        missing = [{"email": f"nobody{i}@example.test", "password": "x"} for i in range(3)]
        assert [client.post(LOGIN, json=body).status_code for body in missing] == [401, 401, 429]
    # Every refusal is in the audit chain, the throttled ones told apart (closing the app
    # above flushed the writer).
    records = asyncio.run(read_records(gateway.settings.effective_database_url, None))
    refused = [
        (r["status_code"], json.loads(r["details"])["reason"])
        for r in records
        if r["action"] == "auth.login_failed"
    ]
    assert refused == [
        *[(401, "password")] * 5,
        (429, "throttled"),
        (401, "password"),
        (401, "password"),
        (429, "throttled"),
    ]


def _median_login_seconds(client: TestClient, email: str, tries: int = 5) -> float:
    times = []
    for _ in range(tries):
        started = time.perf_counter()
        response = client.post(LOGIN, json={"email": email, "password": "wrong password"})
        times.append(time.perf_counter() - started)
        assert response.status_code == 401
    return statistics.median(times)


def test_a_missing_account_takes_as_long_as_a_wrong_password(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path, login_max_failures_per_address=100)
    with TestClient(app=create_app(gateway.settings)) as client:
        _median_login_seconds(client, "warm-up@example.test", tries=1)
        existing = _median_login_seconds(client, ADMIN_EMAIL)
        missing = _median_login_seconds(client, "nobody@example.test")
    slower, faster = max(existing, missing), min(existing, missing)
    assert slower / faster < 3, (existing, missing)


async def _health_during_logins(url: str, logins: int) -> list[float]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        body = {"email": ADMIN_EMAIL, "password": "wrong password"}
        burst = [asyncio.create_task(client.post(LOGIN, json=body)) for _ in range(logins)]
        await asyncio.sleep(0.05)  # let the logins reach the server first
        latencies = []
        while not all(task.done() for task in burst) or len(latencies) < 5:
            started = time.perf_counter()
            assert (await client.get("/health")).status_code == 200
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.01)
        assert [task.result().status_code for task in burst] == [401] * logins
        return latencies


def test_health_stays_fast_while_logins_hash(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path, login_max_failures_per_account=100)
    with serving(create_app(gateway.settings)) as url:
        latencies = asyncio.run(_health_during_logins(url, 12))
    assert statistics.median(latencies) < 0.1, latencies
