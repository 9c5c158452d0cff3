"""A signed-in user without a department: refused the API and chat, or held to the default."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import httpx
from sqlalchemy import select

from gateway import admin_tasks
from gateway.bench.fake_upstream import MODEL as FAKE_MODEL
from gateway.db.models import User
from gateway.settings import Settings
from tests.gateway.traffic.conftest import RunningGateway, running_gateway
from tests.gateway.traffic.processes import fake_worker

MEMBER_EMAIL = "member@example.test"
CHAT = {"model": FAKE_MODEL, "messages": [{"role": "user", "content": "hello"}]}


async def _member(settings: Settings) -> str:
    """A member with no department (as SSO makes one whose groups map to none)."""
    password = await admin_tasks.create_admin(settings, MEMBER_EMAIL)
    async with admin_tasks.transaction(settings) as db:
        user = await db.scalar(select(User).where(User.email == MEMBER_EMAIL))
        assert user is not None and user.department_id is None
        user.role = "member"
    return password


def _signed_in(gateway: RunningGateway) -> tuple[httpx.Client, dict[str, str]]:
    password = asyncio.run(_member(gateway.settings))
    client = httpx.Client(base_url=gateway.url, timeout=30)
    login = client.post("/auth/local/login", json={"email": MEMBER_EMAIL, "password": password})
    assert login.status_code == 200, login.text
    return client, {"x-csrf-token": login.json()["csrf_token"]}


def test_a_user_without_a_department_is_refused_the_api(tmp_path: Path) -> None:
    with fake_worker() as (worker_url, _), running_gateway(tmp_path, [worker_url]) as gateway:
        gateway.department("quality")  # departments exist; the user is in none of them
        client, csrf = _signed_in(gateway)
        with contextlib.closing(client):
            for response in (
                client.get("/v1/models"),
                client.post("/v1/chat/completions", json=CHAT, headers=csrf),
            ):
                assert response.status_code == 403, response.text
                error = response.json()["error"]
                assert error["code"] == "no_department" and error["type"] == "permission_error"
                assert "ask an admin to put you in a department" in error["message"]


def test_the_default_department_admits_and_limits_them(tmp_path: Path) -> None:
    with (
        fake_worker() as (worker_url, _),
        running_gateway(tmp_path, [worker_url], default_department="quality") as gateway,
    ):
        gateway.department("quality", requests_per_minute=1)
        client, csrf = _signed_in(gateway)
        with contextlib.closing(client):
            assert client.get("/api/me").json()["department"] == "quality"
            models = client.get("/v1/models")
            assert [m["id"] for m in models.json()["data"]] == [FAKE_MODEL]
            first = client.post("/v1/chat/completions", json=CHAT, headers=csrf)
            assert first.status_code == 200, first.text
            second = client.post("/v1/chat/completions", json=CHAT, headers=csrf)
            assert second.status_code == 429
            assert second.json()["error"]["code"] == "rate_limit_exceeded"
            assert "department quality" in second.json()["error"]["message"]


def test_a_default_department_that_does_not_exist_refuses_them(tmp_path: Path) -> None:
    with (
        fake_worker() as (worker_url, _),
        running_gateway(tmp_path, [worker_url], default_department="no-such-dept") as gateway,
    ):
        client, _ = _signed_in(gateway)
        with contextlib.closing(client):
            response = client.get("/v1/models")
        assert response.status_code == 403
        assert response.json()["error"]["code"] == "no_department"


def test_the_embedded_first_start_gives_its_admin_a_department(tmp_path: Path) -> None:
    """Whoever ran `make run` signs in and can chat: an empty appliance's first admin is in
    "General". A second start, or an appliance that has departments, changes nothing."""
    from litestar.testing import TestClient

    from gateway.app import create_app
    from tests.gateway.helpers import sign_in

    settings = Settings(data_dir=tmp_path)
    admin_tasks.migrate_database(settings)
    password = asyncio.run(admin_tasks.first_start_admin(settings))
    assert password is not None
    with TestClient(app=create_app(settings)) as client:
        sign_in(client, admin_tasks.DEFAULT_ADMIN_EMAIL, password)
        assert client.get("/api/me").json()["department"] == "general"
    assert asyncio.run(admin_tasks.first_start_admin(settings)) is None

    other = Settings(data_dir=tmp_path / "other")
    admin_tasks.migrate_database(other)
    asyncio.run(admin_tasks.create_department(other, "Quality", "quality"))
    second = asyncio.run(admin_tasks.first_start_admin(other))
    assert second is not None
    with TestClient(app=create_app(other)) as client:
        sign_in(client, admin_tasks.DEFAULT_ADMIN_EMAIL, second)
        assert client.get("/api/me").json()["department"] is None
