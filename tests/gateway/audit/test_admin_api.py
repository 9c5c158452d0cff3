"""`/api/admin/audit`: filters, keyset pages newest first, CSV export, and who may ask.

Also the wiring: the app starts its writer on startup and flushes it on shutdown.
"""

from __future__ import annotations

import asyncio
import csv
import io
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from tests.gateway.audit.support import T0, entry, request_ids_in_seq_order
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in

DEPT_A, DEPT_B, KEY = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
# The set-up's admin records (admin, department, key) come first in the chain.
SETUP = 3
REQUESTS = {"action": "api.request"}


def _entries() -> list[Any]:
    return [
        entry(
            n,
            department_id=DEPT_A if n % 2 == 0 else DEPT_B,
            status_code=429 if n % 10 == 0 else 200,
            api_key_id=KEY if n % 3 == 0 else None,
            prompt_body=f"prompt {n}" if n == 7 else None,
        )
        for n in range(120)
    ]


def _all_pages(client: TestClient, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    after = None
    while True:
        query = {**REQUESTS, **params, **({"after": after} if after else {})}
        page = client.get("/api/admin/audit/", params=query)
        assert page.status_code == 200, page.text
        items += page.json()["items"]
        after = page.json()["next_cursor"]
        if after is None:
            return items


def test_search_pages_export_and_guard(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    asyncio.run(admin_tasks.create_department(gateway.settings, "Research", "research"))
    key = asyncio.run(admin_tasks.create_key(gateway.settings, "research", "ci", None, None))
    with TestClient(app=create_app(gateway.settings)) as client:
        writer = client.app.state.gateway.audit
        for item in _entries():
            client.blocking_portal.call(writer.submit, item)
        client.blocking_portal.call(writer.flush)
        assert client.get("/api/admin/audit/").status_code == 401
        bearer = {"authorization": f"Bearer {key}"}
        assert client.get("/api/admin/audit/", headers=bearer).status_code == 401
        sign_in(client, ADMIN_EMAIL, gateway.admin_password)

        first = client.get("/api/admin/audit/", params={"limit": 50, **REQUESTS}).json()
        newest_first = list(range(120 + SETUP, 70 + SETUP, -1))
        assert [r["seq"] for r in first["items"]] == newest_first
        assert first["next_cursor"] == str(71 + SETUP)
        assert first["items"][0]["request_id"] == "t-119"
        assert "prompt_body" not in first["items"][0]  # bodies only with one record
        everything = _all_pages(client, limit=50)
        assert [r["seq"] for r in everything] == list(range(120 + SETUP, SETUP, -1))
        # The same log, filtered by action: the set-up's CLI records, and a prefix match.
        created = _all_pages(client, action="key.*")
        assert [(r["action"], r["user_email"], r["seq"]) for r in created] == [
            ("key.create", "cli", SETUP)
        ]
        assert created[0]["details"]["after"]["name"] == "ci"
        assert _all_pages(client, action="department.create")[0]["target_type"] == "department"

        dept_a = _all_pages(client, department_id=str(DEPT_A), limit=7)
        assert len(dept_a) == 60 and {r["department_id"] for r in dept_a} == {str(DEPT_A)}
        refused_b = _all_pages(client, department_id=str(DEPT_B), status=429)
        assert refused_b == []  # 429s are the multiples of 10: all even, all department A
        refused = _all_pages(client, status="429")
        assert [r["request_id"] for r in refused] == [f"t-{n}" for n in range(110, -1, -10)]
        by_key = _all_pages(client, api_key_id=str(KEY))
        assert len(by_key) == 40
        window = {
            "since": (T0 + timedelta(milliseconds=10)).isoformat(),
            "until": (T0 + timedelta(milliseconds=20)).isoformat(),
        }
        assert [r["request_id"] for r in _all_pages(client, **window)] == [
            f"t-{n}" for n in range(19, 9, -1)
        ]
        user = _all_pages(client, user_id=str(uuid.UUID(int=1)), since="2026-12-01T09:00:00Z")
        assert len(user) == 40

        bad = {
            "since": "yesterday",
            "until": "2026-13-01",
            "department_id": "research",
            "status": "ok",
            "limit": "501",
            "after": "-3",
            "action": "key revoke",
        }
        for name, value in bad.items():
            response = client.get("/api/admin/audit/", params={name: value})
            assert response.status_code == 400, name
            assert response.json()["detail"].startswith(f"{name}: "), response.text
        response = client.get("/api/admin/audit/export.csv", params={"status": "x"})
        assert response.status_code == 400 and "status" in response.json()["detail"]

        exported = client.get(
            "/api/admin/audit/export.csv", params={"department_id": str(DEPT_B), **REQUESTS}
        )
        assert exported.status_code == 200
        # Once: Litestar appends the charset itself (it was there twice, found by the fuzzer).
        assert exported.headers["content-type"] == "text/csv; charset=utf-8"
        rows = list(csv.DictReader(io.StringIO(exported.text)))
        assert [r["request_id"] for r in rows] == [f"t-{n}" for n in range(119, 0, -2)]
        assert rows[0]["status_code"] == "200" and rows[0]["ttft_ms"] == "12.5"
        assert rows[0]["created_at"] == (T0 + timedelta(milliseconds=119)).isoformat()

        detail = client.get(f"/api/admin/audit/{8 + SETUP}").json()  # t-7
        assert (detail["request_id"], detail["prompt_body"]) == ("t-7", "prompt 7")
        assert client.get("/api/admin/audit/999").status_code == 404

        # Submitted just before shutdown: the writer flushes on the way out.
        client.blocking_portal.call(writer.submit, entry(500))
    url = gateway.settings.effective_database_url
    assert asyncio.run(request_ids_in_seq_order(url))[-1] == "t-500"
