"""`/api/admin/usage` over real traffic: a gateway in front of the tiny worker, requests by
key and by the web app's session, one refused by a limit; the answers add up to what the
audit records say, on SQLite and on Postgres."""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.gateway.postgres import fresh_postgres
from tests.gateway.traffic.conftest import MODEL, RunningGateway, running_gateway
from tests.gateway.usage.support import from_records, rollups

# Long enough to fill a few prefix-cache blocks, so that asking twice reuses them.
PROMPT = "Summarise the bore log of the north shaft, day by day, in plain words. " * 3
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 3}
ADMIN = "root@example.test"


@pytest.fixture(params=["sqlite", "postgres"])
def gateway(
    request: pytest.FixtureRequest, worker: str, tmp_path: Path
) -> Iterator[RunningGateway]:
    options: dict[str, Any] = {"default_department": "quality"}
    with contextlib.ExitStack() as stack:
        if request.param == "postgres":
            url = stack.enter_context(fresh_postgres(request.getfixturevalue("database_url")))
            options["database_url"] = url
        yield stack.enter_context(running_gateway(tmp_path, [worker], **options))


def _session(gateway: RunningGateway) -> tuple[httpx.Client, dict[str, str]]:
    client = httpx.Client(base_url=gateway.url, timeout=60)
    login = client.post(
        "/auth/local/login", json={"email": ADMIN, "password": gateway.admin_password}
    )
    assert login.status_code == 200, login.text
    return client, {"x-csrf-token": login.json()["csrf_token"]}


def _traffic(gateway: RunningGateway, admin: httpx.Client, csrf: dict[str, str]) -> int:
    """Three key requests, two by the web app, two by a key whose department allows one a
    minute (the second refused); returns how many requests were made."""
    quality = gateway.client(gateway.department("quality"))
    for _ in range(3):
        quality.chat.completions.create(**CHAT, extra_body={"ignore_eos": True})
    for _ in range(2):
        reply = admin.post("/v1/chat/completions", json=CHAT, headers=csrf)
        assert reply.status_code == 200, reply.text
    lab = gateway.client(gateway.department("lab", requests_per_minute=1))
    lab.chat.completions.create(**CHAT)
    with pytest.raises(openai.RateLimitError):
        lab.chat.completions.create(**CHAT)
    return 7


def test_the_usage_api_adds_up_to_the_audit_records(gateway: RunningGateway) -> None:
    admin, csrf = _session(gateway)
    with contextlib.closing(admin):
        made = _traffic(gateway, admin, csrf)
        records = gateway.audit_records(wait_for=made)
        assert len(records) == made
        db_url = gateway.settings.effective_database_url
        assert asyncio.run(rollups(db_url)) == asyncio.run(from_records(db_url))

        today = datetime.now(UTC).date().isoformat()
        days = sorted({str(r["created_at"])[:10] for r in records})
        span = {"since": days[0], "until": max(days[-1], today)}
        daily = admin.get("/api/admin/usage/daily", params=span)
        assert daily.status_code == 200, daily.text
        rows = daily.json()["rows"]
        for field in ("requests", "prompt_tokens", "completion_tokens", "cached_tokens"):
            column = "status_code" if field == "requests" else field
            want = len(records) if field == "requests" else sum(r[column] for r in records)
            assert sum(row[field] for row in rows) == want, field
        by_via = {
            via: sum(row["requests"] for row in rows if row["via"] == via) for via in ("ui", "api")
        }
        assert by_via == {"ui": 2, "api": 5}
        slugs = {row["department_slug"] for row in rows}
        assert slugs == {"quality", "lab"}
        ui_tokens = sum(
            r["prompt_tokens"] + r["completion_tokens"] for r in records if r["details"]
        )
        # The same prompt five times over: the prefix cache served part of the later ones.
        assert sum(row["cached_tokens"] for row in rows) > 0

        # One department only
        quality_id = next(r["department_id"] for r in records if r["department_slug"] == "quality")
        only = admin.get(
            "/api/admin/usage/daily", params={**span, "department_id": str(quality_id)}
        ).json()["rows"]
        assert {row["department_slug"] for row in only} == {"quality"}
        assert sum(row["requests"] for row in only) == 5

        users = admin.get("/api/admin/usage/top", params={**span, "by": "user"}).json()
        assert [(u["label"], u["total_tokens"], u["requests"]) for u in users["items"]] == [
            (ADMIN, ui_tokens, 2)
        ]
        keys = admin.get("/api/admin/usage/top", params={**span, "by": "key"}).json()["items"]
        assert [k["label"] for k in keys] == ["tests", "tests"]  # quality's key first
        assert [k["requests"] for k in keys] == [3, 2]
        assert keys[0]["total_tokens"] >= keys[1]["total_tokens"]
        assert keys[0]["department_id"] == str(quality_id)

        refusals = admin.get("/api/admin/usage/refusals", params=span).json()
        counted = {r["reason"]: r["count"] for r in refusals["reasons"]}
        assert refusals["total"] == 1 and counted["rate_limit:requests_per_minute"] == 1
        assert sum(counted.values()) == 1 and len(counted) == 5

        export = admin.get("/api/admin/usage/export.csv", params=span)
        assert export.status_code == 200
        assert export.headers["content-type"] == "text/csv; charset=utf-8"
        assert "attachment" in export.headers["content-disposition"]
        table = list(csv.DictReader(io.StringIO(export.text)))
        assert sum(int(row["requests"]) for row in table) == made
        assert sum(int(row["refused_requests_per_minute"]) for row in table) == 1
        assert {row["user_email"] for row in table if row["via"] == "ui"} == {ADMIN}
        assert {row["api_key_name"] for row in table if row["via"] == "api"} == {"tests"}

        # A key may not read it (admins only, with a session).
        key = gateway.department("ops")
        refused = httpx.get(
            f"{gateway.url}/api/admin/usage/daily", headers={"authorization": f"Bearer {key}"}
        )
        assert refused.status_code == 401


BAD = [
    {"since": "yesterday"},
    {"since": "2026-13-01"},
    {"until": "2026-02-30"},
    {"since": "20261201"},
    {"since": "2026-W49-1"},
    {"since": "2026-12-01\n"},
    {"since": "2026-12-02", "until": "2026-12-01"},
    {"since": "2025-01-01", "until": "2026-12-31"},  # longer than 366 days
    {"since": "0001-01-01", "until": "9999-12-31"},
    {"department_id": "not-a-uuid"},
    {"department_id": "\x00"},
]


@pytest.mark.parametrize("path", ["daily", "top", "refusals", "export.csv"])
def test_bad_parameters_are_a_400_naming_them(tmp_path: Path, path: str) -> None:
    from litestar.testing import TestClient

    from gateway.app import create_app
    from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in

    gateway = embedded_gateway(tmp_path)
    with TestClient(app=create_app(gateway.settings)) as client:
        sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        bad = [*BAD]
        if path == "top":
            bad += [{"by": "team"}, {"limit": "0"}, {"limit": "101"}, {"limit": "ten"}]
        for params in bad:
            reply = client.get(f"/api/admin/usage/{path}", params=params)
            assert reply.status_code == 400, (params, reply.text)
            assert next(iter(params)) in reply.json()["detail"], (params, reply.text)
        # The edges of the calendar, and no parameters at all, are fine.
        for params in (
            {},
            {"until": "0001-01-01"},
            {"since": "9999-12-31", "until": "9999-12-31"},
            {"since": "2025-12-31", "until": "2026-12-31"},  # exactly 366 days
        ):
            reply = client.get(f"/api/admin/usage/{path}", params=params)
            assert reply.status_code == 200, (params, reply.text)
