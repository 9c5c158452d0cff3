"""API keys end to end through the admin API and the Bearer guard."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.keys.tokens import KEY_PREFIX
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in


def _api_status(client: TestClient, key: str | None) -> int:
    """What the OpenAI API (its /v1/models) answers ``key``; the allow-lists it applies are
    tested through the proxy in tests/gateway/proxy/test_allow_list.py."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return client.get("/v1/models", headers=headers).status_code


def _client(tmp_path: Path) -> tuple[TestClient, str]:
    gateway = embedded_gateway(tmp_path)
    client = TestClient(app=create_app(gateway.settings))
    client.__enter__()
    csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
    return client, csrf


def _department(client: TestClient, csrf: str, slug: str) -> str:
    response = client.post(
        "/api/admin/departments/",
        json={"name": slug.title(), "slug": slug},
        headers={"x-csrf-token": csrf},
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_key_lifecycle_revoke_expire_models_and_no_cleartext(tmp_path: Path) -> None:
    client, csrf = _client(tmp_path)
    headers = {"x-csrf-token": csrf}
    dept = _department(client, csrf, "research")
    created = client.post(
        "/api/admin/keys/",
        json={"department_id": dept, "name": "ci", "allowed_models": ["tiny"]},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    key = created.json()["key"]
    assert key.startswith(KEY_PREFIX) and len(key) > 40
    bearer = {"authorization": f"Bearer {key}"}
    # The key works and names its department; no key, or a wrong one, does not.
    anonymous = TestClient(app=client.app)
    assert _api_status(anonymous, key) == 200
    assert _api_status(anonymous, None) == 401
    assert _api_status(anonymous, f"{key[:-2]}xx") == 401
    me = anonymous.get("/api/me", headers=bearer).json()
    assert me["kind"] == "api_key" and me["department"] == "research"
    assert me["api_key_name"] == "ci"
    # Listed without the secret, with the last-used time recorded.
    listed = client.get("/api/admin/keys/").json()["items"]
    assert [k["name"] for k in listed] == ["ci"] and listed[0]["last_used_at"] is not None
    assert key not in client.get("/api/admin/keys/").text
    # Revoked: refused.
    key_id = created.json()["api_key"]["id"]
    assert client.post(f"/api/admin/keys/{key_id}/revoke", headers=headers).status_code == 200
    assert _api_status(anonymous, key) == 401
    assert anonymous.get("/api/me", headers=bearer).status_code == 401
    # The database holds only the 64-hex-digit keyed hash, never the key.
    client.__exit__(None, None, None)
    database = sqlite3.connect(tmp_path / "enclave.db")
    stored = [row[0] for row in database.execute("SELECT key_hash FROM api_keys")]
    dump = "\n".join(database.iterdump())
    database.close()
    assert len(stored) == 1 and len(stored[0]) == 64 and key not in dump
    assert key[len(KEY_PREFIX) :] not in dump


def test_rotation_keeps_old_key_for_grace_then_refuses(tmp_path: Path) -> None:
    client, csrf = _client(tmp_path)
    headers = {"x-csrf-token": csrf}
    dept = _department(client, csrf, "legal")
    created = client.post(
        "/api/admin/keys/", json={"department_id": dept, "name": "app"}, headers=headers
    ).json()
    old_id, old_key = created["api_key"]["id"], created["key"]
    rotated = client.post(
        f"/api/admin/keys/{old_id}/rotate", json={"grace_seconds": 3600}, headers=headers
    )
    assert rotated.status_code == 201, rotated.text
    new_key = rotated.json()["key"]
    assert new_key != old_key
    for key in (old_key, new_key):  # both work during the grace period
        assert _api_status(client, key) == 200
    second = client.post(f"/api/admin/keys/{old_id}/rotate", json={}, headers=headers)
    assert second.status_code == 201  # grace 0: the old key ends now
    assert _api_status(client, old_key) == 401
    client.__exit__(None, None, None)


def test_cli_tasks_create_key_that_expires(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    settings = gateway.settings
    asyncio.run(admin_tasks.create_department(settings, "Finance", "finance"))
    asyncio.run(admin_tasks.set_quota(settings, "finance", 1000, 10))
    key = asyncio.run(admin_tasks.create_key(settings, "finance", "batch", None, 1))
    keys = asyncio.run(admin_tasks.list_keys(settings, "finance"))
    assert [k.name for k in keys] == ["batch"] and keys[0].expires_at is not None
    database = sqlite3.connect(tmp_path / "enclave.db")
    database.execute("UPDATE api_keys SET expires_at = '2000-01-01 00:00:00.000000'")
    database.commit()
    database.close()
    with TestClient(app=create_app(settings)) as client:
        assert _api_status(client, key) == 401
