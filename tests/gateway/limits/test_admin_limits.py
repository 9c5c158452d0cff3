"""Limits through the admin API and `enclave admin set-quota` (embedded gateway, SQLite)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from litestar.testing import TestClient

from gateway import cli
from gateway.db.models import ApiKey, Department
from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot
from gateway.domain.limits import Limits, scopes_for
from tests.gateway.helpers import ADMIN_EMAIL, client_for, embedded_gateway, sign_in

LIMITS = {
    "requests_per_minute": 60,
    "tokens_per_minute": 40_000,
    "concurrent_requests": 4,
    "daily_token_quota": 1_000_000,
    "monthly_token_quota": 20_000_000,
}


@pytest.fixture
def admin(tmp_path: Path) -> tuple[TestClient, dict[str, str]]:
    gateway = embedded_gateway(tmp_path)
    client = client_for(gateway)
    client.__enter__()
    csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
    return client, {"x-csrf-token": csrf}


def test_department_limits_create_update_and_validate(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = admin
    body = {"name": "Research", "slug": "research", **LIMITS, "audit_bodies": True}
    created = client.post("/api/admin/departments/", json=body, headers=headers)
    assert created.status_code == 201, created.text
    assert {k: created.json()[k] for k in [*LIMITS, "audit_bodies"]} == {
        **LIMITS,
        "audit_bodies": True,
    }
    url = f"/api/admin/departments/{created.json()['id']}"
    changed = client.patch(
        url, json={"tokens_per_minute": None, "audit_bodies": False}, headers=headers
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["tokens_per_minute"] is None and changed.json()["audit_bodies"] is False
    assert changed.json()["requests_per_minute"] == 60  # untouched
    for field in LIMITS:
        refused = client.patch(url, json={field: 0}, headers=headers)
        assert refused.status_code == 400 and field in refused.json()["detail"]
    bad = {"name": "X", "slug": "x", "concurrent_requests": -2}
    refused = client.post("/api/admin/departments/", json=bad, headers=headers)
    assert refused.status_code == 400 and "concurrent_requests" in refused.json()["detail"]
    client.__exit__(None, None, None)


def test_key_limits_create_patch_and_survive_rotation(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, headers = admin
    dept = client.post(
        "/api/admin/departments/", json={"name": "Ops", "slug": "ops"}, headers=headers
    ).json()["id"]
    created = client.post(
        "/api/admin/keys/",
        json={"department_id": dept, "name": "ci", "requests_per_minute": 10},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    key = created.json()["api_key"]
    assert key["requests_per_minute"] == 10 and key["daily_token_quota"] is None
    url = f"/api/admin/keys/{key['id']}"
    patched = client.patch(
        url, json={"daily_token_quota": 5000, "requests_per_minute": None}, headers=headers
    )
    assert patched.status_code == 200, patched.text
    assert patched.json()["daily_token_quota"] == 5000
    assert patched.json()["requests_per_minute"] is None
    refused = client.patch(url, json={"tokens_per_minute": 0}, headers=headers)
    assert refused.status_code == 400 and "tokens_per_minute" in refused.json()["detail"]
    unknown = client.patch(url, json={"name": "renamed"}, headers=headers)
    assert unknown.status_code == 400  # only limits change here
    rotated = client.post(f"{url}/rotate", json={}, headers=headers)
    assert rotated.json()["api_key"]["daily_token_quota"] == 5000
    missing = client.patch(
        "/api/admin/keys/00000000-0000-0000-0000-000000000000", json={}, headers=headers
    )
    assert missing.status_code == 404
    signed_out = TestClient(app=client.app)
    assert signed_out.patch(url, json={"daily_token_quota": 1}).status_code == 401
    client.__exit__(None, None, None)


def test_set_quota_changes_only_the_limits_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    embedded_gateway(tmp_path)
    monkeypatch.setenv("ENCLAVE_DATA_DIR", str(tmp_path))
    assert cli.main(["admin", "create-department", "Research", "--slug", "research"]) == 0
    capsys.readouterr()
    argv = [
        "admin",
        "set-quota",
        "research",
        "--requests-per-minute",
        "60",
        "--tokens-per-minute",
        "40000",
        "--concurrent-requests",
        "4",
        "--daily-tokens",
        "1000000",
        "--monthly-tokens",
        "20000000",
        "--audit-bodies",
        "on",
    ]
    assert cli.main(argv) == 0
    assert json.loads(capsys.readouterr().out)["tokens_per_minute"] == 40_000
    assert cli.main(["admin", "set-quota", "research", "--daily-tokens", "none"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["daily_token_quota"] is None and shown["audit_bodies"] is True
    assert {k: shown[k] for k in LIMITS if k != "daily_token_quota"} == {
        k: v for k, v in LIMITS.items() if k != "daily_token_quota"
    }
    with pytest.raises(SystemExit):
        cli.main(["admin", "set-quota", "research", "--concurrent-requests", "0"])
    assert "must be positive" in capsys.readouterr().err


def test_scopes_for_reads_the_new_columns() -> None:
    department = Department(slug="research", **LIMITS)
    key = ApiKey(name="ci", concurrent_requests=2)
    dept_scope, key_scope = scopes_for(DepartmentSnapshot.of(department), KeySnapshot.of(key))
    assert dept_scope.limits == Limits(60, 40_000, 4, 1_000_000, 20_000_000)
    assert key_scope.limits == Limits(concurrent_requests=2)
