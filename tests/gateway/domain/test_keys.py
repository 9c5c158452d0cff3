"""API keys end to end through the admin API and the Bearer guard."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from litestar import Request, get
from litestar.exceptions import PermissionDeniedException
from litestar.params import FromPath
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.identity.guards import principal_of, require_api_key
from gateway.domain.keys.service import model_allowed
from gateway.domain.keys.tokens import KEY_PREFIX
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in


@get("/test/model/{model:str}", guards=[require_api_key], sync_to_thread=False)
def use_model(request: Request, model: FromPath[str]) -> dict[str, str]:
    """Stands in for the OpenAI proxy: the guard plus the allow-list check it will make."""
    principal = principal_of(request)
    assert principal.api_key is not None
    if not model_allowed(principal.api_key, principal.department, model):
        raise PermissionDeniedException(f"this key may not use {model}")
    return {"department": principal.department.slug if principal.department else ""}


def _client(tmp_path: Path) -> tuple[TestClient, str]:
    gateway = embedded_gateway(tmp_path)
    client = TestClient(app=create_app(gateway.settings, extra_route_handlers=[use_model]))
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
    # The key works, for its model only, and names its department.
    anonymous = TestClient(app=client.app)
    assert anonymous.get("/test/model/tiny", headers=bearer).json() == {"department": "research"}
    assert anonymous.get("/test/model/big", headers=bearer).status_code == 403
    assert anonymous.get("/test/model/tiny").status_code == 401
    wrong = {"authorization": f"Bearer {key[:-2]}xx"}
    assert anonymous.get("/test/model/tiny", headers=wrong).status_code == 401
    me = anonymous.get("/api/me", headers=bearer).json()
    assert me["kind"] == "api_key" and me["department"] == "research"
    # Listed without the secret, with the last-used time recorded.
    listed = client.get("/api/admin/keys/").json()["items"]
    assert [k["name"] for k in listed] == ["ci"] and listed[0]["last_used_at"] is not None
    assert key not in client.get("/api/admin/keys/").text
    # Revoked: refused.
    key_id = created.json()["api_key"]["id"]
    assert client.post(f"/api/admin/keys/{key_id}/revoke", headers=headers).status_code == 200
    assert anonymous.get("/test/model/tiny", headers=bearer).status_code == 401
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
        response = client.get("/test/model/any", headers={"authorization": f"Bearer {key}"})
        assert response.status_code == 200
    second = client.post(f"/api/admin/keys/{old_id}/rotate", json={}, headers=headers)
    assert second.status_code == 201  # grace 0: the old key ends now
    response = client.get("/test/model/any", headers={"authorization": f"Bearer {old_key}"})
    assert response.status_code == 401
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
    with TestClient(app=create_app(settings, extra_route_handlers=[use_model])) as client:
        response = client.get("/test/model/x", headers={"authorization": f"Bearer {key}"})
    assert response.status_code == 401
