"""A migrated gateway for tests: the embedded default on a SQLite file in tmp_path."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.settings import Settings

ADMIN_EMAIL = "root@example.test"


@dataclass
class Gateway:
    settings: Settings
    admin_password: str


def embedded_gateway(tmp_path: Path, **overrides: object) -> Gateway:
    settings = Settings(data_dir=tmp_path, **overrides)  # type: ignore[arg-type]
    admin_tasks.migrate_database(settings)
    password = asyncio.run(admin_tasks.create_admin(settings, ADMIN_EMAIL))
    return Gateway(settings, password)


def sign_in(client: TestClient, email: str, password: str) -> str:
    """Signs ``client`` in with the local account; returns the session's CSRF token."""
    response = client.post("/auth/local/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    return str(response.json()["csrf_token"])


def client_for(gateway: Gateway) -> TestClient:
    return TestClient(app=create_app(gateway.settings))
