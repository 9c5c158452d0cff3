"""Signed-in callers for the conversation tests: two members and the admin, one client."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.domain.identity.principal import CSRF_HEADER, SESSION_COOKIE
from tests.gateway.helpers import ADMIN_EMAIL, Gateway


@dataclass
class Person:
    """Each call names this person's session itself: one client serves every person."""

    client: TestClient
    session: str
    csrf: str

    def call(
        self,
        method: str,
        path: str,
        json: Any = None,
        *,
        csrf: bool = True,
        content: bytes | None = None,
        **params: Any,
    ) -> httpx.Response:
        """``content``: a raw JSON body, for what ``json`` cannot encode."""
        headers = {"cookie": f"{SESSION_COOKIE}={self.session}"}
        if csrf and method not in {"GET", "HEAD"}:
            headers[CSRF_HEADER] = self.csrf
        if content is not None:
            headers["content-type"] = "application/json"
        self.client.cookies.clear()
        return self.client.request(
            method, path, json=json, content=content, headers=headers, params=params
        )

    def ok(self, method: str, path: str, json: Any = None, **params: Any) -> Any:
        response = self.call(method, path, json, **params)
        assert response.status_code in (200, 201, 204), (method, path, response.text)
        return response.json() if response.content else None

    def new(self, model: str = "tiny", **fields: Any) -> dict[str, Any]:
        created: dict[str, Any] = self.ok("POST", "/api/conversations", {"model": model, **fields})
        return created


@dataclass
class People:
    alice: Person
    bob: Person
    admin: Person


def sign_in_as(client: TestClient, email: str, password: str) -> Person:
    response = client.post("/auth/local/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    return Person(client, response.cookies[SESSION_COOKIE], response.json()["csrf_token"])


def people(client: TestClient, gateway: Gateway) -> People:
    """Alice and Bob, members (local accounts made as admins, then demoted), and the admin."""
    admin = sign_in_as(client, ADMIN_EMAIL, gateway.admin_password)
    members = []
    for email in ("alice@example.test", "bob@example.test"):
        password = asyncio.run(admin_tasks.create_admin(gateway.settings, email))
        users = admin.ok("GET", "/api/admin/users")["items"]
        user_id = next(u["id"] for u in users if u["email"] == email)
        assert admin.ok("PATCH", f"/api/admin/users/{user_id}", {"role": "member"})["role"] == (
            "member"
        )
        members.append(sign_in_as(client, email, password))
    return People(members[0], members[1], admin)
