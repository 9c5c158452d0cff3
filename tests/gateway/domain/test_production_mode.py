"""Production mode: Postgres (a fresh database, dropped after) and Redis-backed sessions."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.settings import Settings, SettingsError
from tests.gateway.helpers import ADMIN_EMAIL, sign_in
from tests.gateway.postgres import fresh_postgres


@pytest.fixture
def fresh_database(database_url: str) -> Iterator[str]:
    with fresh_postgres(database_url, "enclave_prod") as url:
        yield url


def test_production_requires_its_secrets() -> None:
    with pytest.raises(SettingsError, match="ENCLAVE_SECRET_KEY"):
        Settings.from_env({"ENCLAVE_MODE": "production"})


def _production(tmp_path: Path, database: str, redis_url: str, **overrides: Any) -> Settings:
    """Production settings on ``database``, migrated, with the admin created."""
    settings = Settings(
        mode="production",
        data_dir=tmp_path,
        database_url=database,
        redis_url=redis_url,
        secret_key="s" * 40,
        **overrides,
    )
    admin_tasks.migrate_database(settings)
    return settings


def test_sessions_live_in_redis_and_keys_in_postgres(
    fresh_database: str, redis_url: str, tmp_path: Path
) -> None:
    public_url = "https://enclave.example.test"
    settings = _production(tmp_path, fresh_database, redis_url, public_url=public_url)
    password = asyncio.run(admin_tasks.create_admin(settings, ADMIN_EMAIL))
    asyncio.run(admin_tasks.create_department(settings, "Research", "research"))
    key = asyncio.run(admin_tasks.create_key(settings, "research", "ci", None, None))
    assert not (tmp_path / "secret_key").exists()  # production never generates a secret
    store = redis.Redis.from_url(redis_url)
    before = set(store.scan_iter("enclave:session:*"))
    with TestClient(app=create_app(settings), base_url="https://enclave.example.test") as client:
        response = client.post(
            "/auth/local/login", json={"email": ADMIN_EMAIL, "password": password}
        )
        assert "secure" in response.headers["set-cookie"].lower()
        created = set(store.scan_iter("enclave:session:*")) - before
        assert len(created) == 1
        ttl = store.pttl(next(iter(created)))
        assert 0 < ttl <= settings.session_idle_minutes * 60_000
        assert client.get("/api/me").json()["user"]["email"] == ADMIN_EMAIL
        store.delete(*created)  # the server-side session is the truth, not the cookie
        assert client.get("/api/me").status_code == 401
        sign_in(client, ADMIN_EMAIL, password)
        keys = client.get("/api/admin/keys/").json()["items"]
        assert [k["name"] for k in keys] == ["ci"]
        client.cookies.clear()  # the key alone (a per-request cookies={} kept the session)
        me = client.get("/api/me", headers={"authorization": f"Bearer {key}"})
        assert me.json()["department"] == "research"
    store.close()


def test_production_cookies_are_secure_whatever_the_public_url(
    fresh_database: str, redis_url: str, tmp_path: Path
) -> None:
    settings = _production(
        tmp_path,
        fresh_database,
        redis_url,
        public_url="http://enclave.internal.test",
        allow_insecure_public_url=True,
    )
    password = asyncio.run(admin_tasks.create_admin(settings, ADMIN_EMAIL))
    app = create_app(settings)
    assert app.state.gateway.secure_cookies  # the SSO login cookie uses the same rule
    store = redis.Redis.from_url(redis_url)
    before = set(store.scan_iter("enclave:session:*"))
    with TestClient(app=app, base_url="http://enclave.internal.test") as client:
        response = client.post(
            "/auth/local/login", json={"email": ADMIN_EMAIL, "password": password}
        )
    assert response.status_code == 200
    cookie = response.headers["set-cookie"].lower()
    assert "secure" in cookie and "httponly" in cookie
    created = set(store.scan_iter("enclave:session:*")) - before
    if created:
        store.delete(*created)
    store.close()
