"""Every admin action and sign-in is one record in the same chain as the API requests."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from litestar.testing import TestClient

from gateway import admin_tasks, cli
from tests.gateway.helpers import ADMIN_EMAIL, Gateway, client_for, embedded_gateway, sign_in
from tests.gateway.traffic.conftest import read_records

OPS_EMAIL = "ops@example.test"


class Admin:
    """A signed-in admin's client, and the admin-action records it has not looked at yet."""

    def __init__(self, gateway: Gateway, client: TestClient) -> None:
        self.gateway = gateway
        self.client = client
        self.csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        self.seen = len(self.all_records())

    def all_records(self) -> list[dict[str, Any]]:
        self.client.blocking_portal.call(self.client.app.state.gateway.audit.flush)
        url = self.gateway.settings.effective_database_url
        return [r for r in asyncio.run(read_records(url, None)) if r["action"] != "api.request"]

    def new_records(self) -> list[dict[str, Any]]:
        records = self.all_records()
        fresh, self.seen = records[self.seen :], len(records)
        return fresh

    def call(self, method: str, path: str, expect: int, **body: Any) -> Any:
        response = self.client.request(
            method, path, json=body or None, headers={"x-csrf-token": self.csrf}
        )
        assert response.status_code == expect, response.text
        return response.json() if response.content else None

    def one_record(self, action: str, target_type: str, target_id: str) -> dict[str, Any]:
        """The one record the last action made, with the admin as actor."""
        [record] = self.new_records()
        assert (record["action"], record["target_type"], record["target_id"]) == (
            action,
            target_type,
            target_id,
        )
        assert record["user_email"] == ADMIN_EMAIL and record["user_id"] is not None
        assert record["client_ip"] == "testclient"
        assert record["request_id"].startswith("req-")
        details: dict[str, Any] = json.loads(record["details"])
        return details


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Admin]:
    gateway = embedded_gateway(tmp_path)
    asyncio.run(admin_tasks.create_admin(gateway.settings, OPS_EMAIL))
    with client_for(gateway) as client:
        yield Admin(gateway, client)


def test_each_admin_action_is_one_record_with_actor_target_and_what_changed(
    admin: Admin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    dept = admin.call("POST", "/api/admin/departments/", 201, name="Quality", slug="quality")
    details = admin.one_record("department.create", "department", dept["id"])
    assert details["after"]["slug"] == "quality" and "before" not in details

    admin.call(
        "PATCH", f"/api/admin/departments/{dept['id']}", 200, requests_per_minute=30, name="QA"
    )
    details = admin.one_record("department.update", "department", dept["id"])
    assert details == {
        "before": {"name": "Quality", "requests_per_minute": None},
        "after": {"name": "QA", "requests_per_minute": 30},
    }

    mapping = admin.call(
        "POST", "/api/admin/group-mappings/", 201, group="qa-team", department_id=dept["id"]
    )
    details = admin.one_record("group_mapping.create", "group_mapping", mapping["id"])
    assert details["after"] == {
        "id": mapping["id"],
        "group": "qa-team",
        "department_id": dept["id"],
    }
    admin.call("DELETE", f"/api/admin/group-mappings/{mapping['id']}", 204)
    details = admin.one_record("group_mapping.delete", "group_mapping", mapping["id"])
    assert details == {
        "before": {"id": mapping["id"], "group": "qa-team", "department_id": dept["id"]}
    }

    created = admin.call("POST", "/api/admin/keys/", 201, department_id=dept["id"], name="ci")
    key_id = created["api_key"]["id"]
    details = admin.one_record("key.create", "api_key", key_id)
    assert details["after"]["name"] == "ci" and details["after"]["display_prefix"]

    admin.call("PATCH", f"/api/admin/keys/{key_id}", 200, daily_token_quota=1000)
    details = admin.one_record("key.update", "api_key", key_id)
    assert details == {"before": {"daily_token_quota": None}, "after": {"daily_token_quota": 1000}}

    rotated = admin.call("POST", f"/api/admin/keys/{key_id}/rotate", 201, grace_seconds=60)
    details = admin.one_record("key.rotate", "api_key", key_id)
    assert details["new_key_id"] == rotated["api_key"]["id"]
    assert details["before"]["expires_at"] is None and details["after"]["expires_at"]

    admin.call("POST", f"/api/admin/keys/{key_id}/revoke", 200)
    details = admin.one_record("key.revoke", "api_key", key_id)
    assert details["before"] == {"revoked_at": None} and details["after"]["revoked_at"]

    users = admin.call("GET", "/api/admin/users/", 200)["items"]
    ops = next(u for u in users if u["email"] == OPS_EMAIL)
    admin.call(
        "PATCH",
        f"/api/admin/users/{ops['id']}",
        200,
        role="member",
        department_id=dept["id"],
        is_active=False,
    )
    details = admin.one_record("user.update", "user", ops["id"])
    assert details == {
        "before": {"department_id": None, "is_active": True, "role": "admin"},
        "after": {"department_id": dept["id"], "is_active": False, "role": "member"},
    }

    # Nothing secret reached the log: neither key, nor a hash, nor a password.
    text = json.dumps([r["details"] for r in admin.all_records()])
    for secret in (created["key"], rotated["key"], admin.gateway.admin_password):
        assert secret not in text
    assert "key_hash" not in text and "password" not in text

    # A refused change (the transaction rolled back) is not logged as done.
    admin.call("PATCH", f"/api/admin/keys/{key_id}", 400, daily_token_quota=-5)
    assert admin.new_records() == []

    # The one chain holds the requests and the admin records, and verifies.
    assert admin.client.post("/v1/chat/completions", json={}).status_code == 403  # no key
    admin.client.blocking_portal.call(admin.client.app.state.gateway.audit.flush)
    monkeypatch.setenv("ENCLAVE_DATA_DIR", str(tmp_path))
    assert cli.main(["audit", "verify"]) == 0
    out = capsys.readouterr().out
    url = admin.gateway.settings.effective_database_url
    every = asyncio.run(read_records(url, None))
    assert {r["action"] for r in every} >= {"api.request", "key.revoke", "auth.login"}
    assert f"audit chain ok: {len(every)} records" in out.splitlines()


def test_sign_ins_failed_sign_ins_and_sign_outs_are_recorded(admin: Admin) -> None:
    [login] = [r for r in admin.all_records() if r["action"] == "auth.login"]
    assert login["user_email"] == ADMIN_EMAIL and json.loads(login["details"]) == {
        "method": "local"
    }

    refused = admin.client.post(
        "/auth/local/login", json={"email": " Ops@Example.test", "password": "guess"}
    )
    assert refused.status_code == 401
    [failed] = admin.new_records()
    assert (failed["action"], failed["user_email"], failed["user_id"]) == (
        "auth.login_failed",
        OPS_EMAIL,
        None,
    )
    assert failed["status_code"] == 401 and "guess" not in (failed["details"] or "")

    admin.call("POST", "/auth/logout", 200)
    [logout] = admin.new_records()
    assert (logout["action"], logout["user_email"]) == ("auth.logout", ADMIN_EMAIL)
    assert logout["target_type"] == "user" and logout["target_id"] == str(login["user_id"])


def test_cli_admin_commands_write_their_records_directly(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    settings = gateway.settings
    asyncio.run(admin_tasks.create_department(settings, "Office", "office"))
    asyncio.run(admin_tasks.set_quota(settings, "office", requests_per_minute=5))
    key = asyncio.run(admin_tasks.create_key(settings, "office", "bot", None, None))
    records = asyncio.run(read_records(settings.effective_database_url, None))
    assert [(r["action"], r["user_email"]) for r in records] == [
        ("user.create_admin", "cli"),
        ("department.create", "cli"),
        ("department.update", "cli"),
        ("key.create", "cli"),
    ]
    assert json.loads(records[2]["details"]) == {
        "before": {"requests_per_minute": None},
        "after": {"requests_per_minute": 5},
    }
    assert key not in json.dumps([r["details"] for r in records])
    # Each commit recorded the chain's head outside the database.
    heads = (tmp_path / "audit-head.log").read_text().splitlines()
    assert [int(line.split()[0]) for line in heads] == [1, 2, 3, 4]
    assert heads[-1].split()[1] == records[-1]["hash"]
