"""The admin console's API on both databases: an embedded gateway on its SQLite file, and
one on a fresh, migrated Postgres database (dropped after)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from litestar.testing import TestClient

from gateway import admin_tasks
from tests.gateway.helpers import ADMIN_EMAIL, Gateway, client_for, embedded_gateway, sign_in
from tests.gateway.postgres import fresh_postgres

MEMBER_EMAIL = "member@example.test"


@dataclass
class Console:
    """An admin's signed-in client, with a member's password to sign in as them."""

    gateway: Gateway
    client: TestClient
    csrf: str
    member_password: str

    @property
    def writes(self) -> dict[str, str]:
        return {"x-csrf-token": self.csrf}

    @contextlib.contextmanager
    def as_member(self) -> Iterator[TestClient]:
        """A second client on the same app, signed in as a member (not an admin)."""
        users = self.client.get("/api/admin/users", params={"q": MEMBER_EMAIL}).json()["items"]
        demoted = self.client.patch(
            f"/api/admin/users/{users[0]['id']}", json={"role": "member"}, headers=self.writes
        )
        assert demoted.status_code == 200, demoted.text
        with self.signed_out() as client:
            sign_in(client, MEMBER_EMAIL, self.member_password)
            yield client

    @contextlib.contextmanager
    def signed_out(self) -> Iterator[TestClient]:
        """The same client without the admin's cookies (given back after)."""
        saved = dict(self.client.cookies)
        self.client.cookies.clear()
        try:
            yield self.client
        finally:
            self.client.cookies.clear()
            self.client.cookies.update(saved)

    def refused_to_others(self, method: str, path: str) -> None:
        """A member gets 403 and an API key 401 on ``method path``."""
        key = self.api_key()
        with self.as_member() as member:
            csrf = member.get("/api/me").json()["csrf_token"]
            reply = member.request(method, path, headers={"x-csrf-token": csrf})
            assert reply.status_code == 403, (method, path, reply.text)
        with self.signed_out() as client:
            reply = client.request(method, path, headers={"authorization": f"Bearer {key}"})
            assert reply.status_code == 401, (method, path, reply.text)

    def api_key(self) -> str:
        """A fresh API key's secret (of a fresh department)."""
        slug = f"keys-{uuid.uuid4().hex[:8]}"
        department = self.client.post(
            "/api/admin/departments", json={"name": slug, "slug": slug}, headers=self.writes
        ).json()
        created = self.client.post(
            "/api/admin/keys", json={"department_id": department["id"], "name": "k"},
            headers=self.writes,
        )  # fmt: skip
        assert created.status_code == 201, created.text
        return str(created.json()["key"])


def _console(gateway: Gateway) -> Iterator[Console]:
    password = asyncio.run(admin_tasks.create_admin(gateway.settings, MEMBER_EMAIL))
    with client_for(gateway) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        yield Console(gateway, client, csrf, password)


@pytest.fixture(params=["sqlite", "postgres"])
def console(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Console]:
    if request.param == "sqlite":
        yield from _console(embedded_gateway(tmp_path))
        return
    with fresh_postgres(request.getfixturevalue("database_url"), "enclave_admin") as url:
        yield from _console(embedded_gateway(tmp_path, database_url=url))


@pytest.fixture
def sqlite_console(tmp_path: Path) -> Iterator[Console]:
    yield from _console(embedded_gateway(tmp_path))
