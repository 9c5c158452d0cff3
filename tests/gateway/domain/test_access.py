"""Sessions, CSRF, and the access rules of every route the app lists."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import uuid
from pathlib import Path

from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import PUBLIC_PATHS, create_app
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in

MEMBER_EMAIL = "member@example.test"


def _routes(client: TestClient) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for route in client.app.routes:
        if route.path in PUBLIC_PATHS:
            continue
        path = re.sub(r"\{[^}:]+:uuid\}", str(uuid.uuid4()), route.path)
        path = re.sub(r"\{[^}:]+:int\}", "1", path)
        path = re.sub(r"\{[^}]+\}", "x", path)
        found.extend(
            (method, path) for method in route.methods if method not in {"OPTIONS", "HEAD"}
        )
    return found


def test_every_route_needs_credentials_and_admin_routes_refuse_members(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    member_password = asyncio.run(admin_tasks.create_admin(gateway.settings, MEMBER_EMAIL))
    with TestClient(app=create_app(gateway.settings)) as client:
        routes = _routes(client)
        assert len(routes) >= 15
        for method, path in routes:
            response = client.request(method, path, json={})
            assert response.status_code == 401, (method, path, response.status_code)
            body = response.json()
            # The OpenAI API answers in OpenAI's error shape; the rest in the gateway's.
            assert body["error"]["message"] if path.startswith("/v1/") else body["detail"]
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        users = client.get("/api/admin/users/?limit=1")
        assert users.status_code == 200 and users.json()["next_cursor"]  # keyset: 2 users
        rest = client.get(f"/api/admin/users/?limit=1&after={users.json()['next_cursor']}")
        everyone = users.json()["items"] + rest.json()["items"]
        member = next(u for u in everyone if u["email"] == MEMBER_EMAIL)
        demote = client.patch(
            f"/api/admin/users/{member['id']}",
            json={"role": "member"},
            headers={"x-csrf-token": csrf},
        )
        assert demote.status_code == 200 and demote.json()["role"] == "member"
    with TestClient(app=create_app(gateway.settings)) as client:
        sign_in(client, MEMBER_EMAIL, member_password)
        assert client.get("/api/me").json()["user"]["role"] == "member"
        for method, path in routes:
            if path.startswith("/api/admin/"):
                response = client.request(method, path, json={})
                assert response.status_code == 403, (method, path, response.status_code)


def test_session_cookie_csrf_logout_and_expiry(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    with TestClient(app=create_app(gateway.settings)) as client:
        bad = client.post("/auth/local/login", json={"email": ADMIN_EMAIL, "password": "nope"})
        assert bad.status_code == 401
        response = client.post(
            "/auth/local/login", json={"email": ADMIN_EMAIL, "password": gateway.admin_password}
        )
        cookie = response.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=lax" in cookie and "secure" not in cookie
        csrf = response.json()["csrf_token"]
        body = {"name": "Ops", "slug": "ops"}
        # A state-changing request with the cookie but without the token is refused.
        assert client.post("/api/admin/departments/", json=body).status_code == 403
        wrong = {"x-csrf-token": "x" * len(csrf)}
        assert client.post("/api/admin/departments/", json=body, headers=wrong).status_code == 403
        ok = client.post("/api/admin/departments/", json=body, headers={"x-csrf-token": csrf})
        assert ok.status_code == 201
        assert (
            client.post(
                "/api/admin/departments/", json=body, headers={"x-csrf-token": csrf}
            ).status_code
            == 409
        )
        assert client.get("/api/me").json()["csrf_token"] == csrf
        # Idle expiry: the session was last seen longer ago than the idle limit.
        database = sqlite3.connect(tmp_path / "enclave.db")
        database.execute("UPDATE sessions SET last_seen_at = '2000-01-01 00:00:00.000000'")
        database.commit()
        database.close()
        assert client.get("/api/me").status_code == 401
        # Absolute expiry: a session in active use still ends at its absolute end.
        sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        assert client.get("/api/me").status_code == 200
        database = sqlite3.connect(tmp_path / "enclave.db")
        database.execute("UPDATE sessions SET expires_at = '2000-01-01 00:00:00.000000'")
        database.commit()
        database.close()
        assert client.get("/api/me").status_code == 401
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        out = client.post("/auth/logout", headers={"x-csrf-token": csrf})
        assert out.status_code == 200 and out.json()["redirect"].endswith("/")
        assert client.get("/api/me").status_code == 401
