"""A chat completion made with a session is the web UI's, and its audit record says so."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import httpx

from gateway.bench.fake_upstream import MODEL as FAKE_MODEL
from tests.gateway.traffic.conftest import running_gateway
from tests.gateway.traffic.processes import fake_worker

CHAT = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hello"}]}


def test_session_requests_are_recorded_as_the_uis_and_key_requests_are_not(
    tmp_path: Path,
) -> None:
    with (
        fake_worker() as (worker_url, _),
        running_gateway(tmp_path, [worker_url], default_department="quality") as gateway,
    ):
        key = gateway.department("quality")
        with contextlib.closing(httpx.Client(base_url=gateway.url, timeout=30)) as client:
            login = client.post(
                "/auth/local/login",
                json={"email": "root@example.test", "password": gateway.admin_password},
            )
            csrf = {"x-csrf-token": login.json()["csrf_token"]}
            by_session = client.post("/v1/chat/completions", json=CHAT, headers=csrf)
            assert by_session.status_code == 200, by_session.text
            client.cookies.clear()
            by_key = client.post(
                "/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer {key}"}
            )
            assert by_key.status_code == 200, by_key.text
        ui, api = gateway.audit_records(wait_for=2)
        assert ui["user_id"] is not None and ui["user_email"] == "root@example.test"
        assert ui["api_key_id"] is None and json.loads(ui["details"]) == {"via": "ui"}
        assert api["api_key_id"] is not None and api["details"] is None  # absent: the API
