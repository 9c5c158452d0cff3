"""A principal holds frozen snapshots, never ORM rows: the key cache keeps principals across
requests and event loops, long after the database session that loaded them has closed."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import msgspec
import pytest
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.identity.middleware import resolve_principal
from gateway.domain.identity.principal import SESSION_COOKIE, Principal
from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot
from gateway.domain.limits.types import Limits
from gateway.domain.users.schemas import UserRead
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in
from tests.gateway.traffic.conftest import set_limits


def _no_orm_state(*values: object) -> bool:
    return not any(hasattr(value, "_sa_instance_state") for value in values)


def test_key_principals_are_frozen_snapshots_that_admin_writes_replace(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    settings = gateway.settings
    asyncio.run(admin_tasks.create_department(settings, "Quality", "quality"))
    asyncio.run(set_limits(settings, "quality", requests_per_minute=5, allowed_models=["a"]))
    key = asyncio.run(admin_tasks.create_key(settings, "quality", "app", ["a", "b"], None))
    with TestClient(app=create_app(settings)) as client:
        state = client.app.state.gateway

        def resolve() -> Principal:
            return client.blocking_portal.call(resolve_principal, state, f"Bearer {key}", "")

        first = resolve()
        api_key, department = first.api_key, first.department
        assert isinstance(api_key, KeySnapshot) and isinstance(department, DepartmentSnapshot)
        assert _no_orm_state(api_key, department)
        assert api_key.name == "app" and api_key.allowed_models == ("a", "b")
        assert department.slug == "quality" and department.allowed_models == ("a",)
        assert department.limits == Limits(requests_per_minute=5)
        with pytest.raises(dataclasses.FrozenInstanceError):
            department.slug = "other"  # type: ignore[misc]
        # Reused from the cache while nothing changed: the very same snapshot.
        assert resolve().department is department
        # An admin write replaces the cached snapshot; the one handed out before is untouched.
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        patched = client.patch(
            f"/api/admin/departments/{department.id}",
            json={"requests_per_minute": 7},
            headers={"x-csrf-token": csrf},
        )
        assert patched.status_code == 200, patched.text
        after = resolve().department
        assert after is not None and after.limits == Limits(requests_per_minute=7)
        assert department.limits == Limits(requests_per_minute=5)

        # A signed-in user's principal holds a frozen copy of the user, too.
        session_id = client.cookies[SESSION_COOKIE]
        cookie = f"{SESSION_COOKIE}={session_id}"
        admin = client.blocking_portal.call(resolve_principal, state, "", cookie)
        assert isinstance(admin.user, UserRead) and _no_orm_state(admin.user)
        assert admin.user.email == ADMIN_EMAIL and admin.is_admin
        with pytest.raises(AttributeError):
            admin.user.role = "member"  # type: ignore[misc]
        assert msgspec.json.decode(msgspec.json.encode(admin.user))["email"] == ADMIN_EMAIL
