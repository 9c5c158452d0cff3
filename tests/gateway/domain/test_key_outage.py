"""API keys while the database is down: revocation wins, and only recent lookups are served."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.db.base import utc_now
from gateway.domain.identity.key_cache import FRESH_S, KeySnapshots
from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot
from gateway.domain.limits.types import Limits
from gateway.settings import Settings
from tests.gateway.helpers import ADMIN_EMAIL, sign_in
from tests.gateway.traffic.processes import Link, fresh_postgres, link_to


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _key(expires_at: datetime | None = None) -> KeySnapshot:
    return KeySnapshot(uuid.uuid4(), uuid.uuid4(), "k", Limits(), None, expires_at=expires_at)


def test_outage_serves_only_recent_lookups_made_under_the_current_generation() -> None:
    clock = Clock()
    snapshots = KeySnapshots(outage_grace_s=300, clock=clock)
    department = DepartmentSnapshot(uuid.uuid4(), "d", "D", Limits(), None)
    snapshots.put("a", _key(), department, "g1")
    clock.now += 299
    assert snapshots.during_outage("a", "g1") is not None
    assert snapshots.during_outage("a", None) is not None  # generation unreadable: age alone
    assert snapshots.during_outage("a", "g2") is None  # an admin write since: maybe a revoke
    clock.now += 2
    assert snapshots.during_outage("a", "g1") is None  # validated too long ago


def test_a_key_seen_dead_is_never_served_again_even_by_a_late_lookup() -> None:
    snapshots = KeySnapshots(outage_grace_s=300, clock=Clock())
    snapshots.put("a", _key(), None, "g1")
    snapshots.forget("a")  # a lookup found it revoked
    assert snapshots.fresh("a", "g1") is None and snapshots.during_outage("a", "g1") is None
    snapshots.put("a", _key(), None, "g1")  # a slower lookup that saw it live, storing late
    assert snapshots.is_dead("a") and snapshots.during_outage("a", "g1") is None
    # A snapshot that has expired since is dropped the same way.
    snapshots.put("b", _key(expires_at=utc_now() - timedelta(seconds=1)), None, "g1")
    assert snapshots.during_outage("b", "g1") is None and snapshots.is_dead("b")


def test_grace_zero_never_serves_without_the_database() -> None:
    clock = Clock()
    snapshots = KeySnapshots(outage_grace_s=0, clock=clock)
    snapshots.put("a", _key(), None, "g1")
    clock.now += 0.001
    assert snapshots.fresh("a", "g1") is None and snapshots.during_outage("a", "g1") is None
    assert KeySnapshots(outage_grace_s=300).fresh_s == FRESH_S
    with pytest.raises(ValueError, match="negative"):
        KeySnapshots(outage_grace_s=-1)


@pytest.fixture
def cut_database(database_url: str) -> Iterator[tuple[Link, str]]:
    """A fresh Postgres behind a link the test can cut (the server itself stays up)."""
    with fresh_postgres(database_url, "enclave_outage") as database, link_to(database) as pair:
        yield pair


def _gateway(through: str, tmp_path: Path, **overrides: object) -> tuple[Settings, str]:
    settings = Settings(data_dir=tmp_path, database_url=through, **overrides)  # type: ignore[arg-type]
    admin_tasks.migrate_database(settings)
    password = asyncio.run(admin_tasks.create_admin(settings, ADMIN_EMAIL))
    asyncio.run(admin_tasks.create_department(settings, "Quality", "quality"))
    return settings, password


def _new_key(settings: Settings, name: str = "app") -> str:
    return str(asyncio.run(admin_tasks.create_key(settings, "quality", name, None, None)))


def _me(client: TestClient, key: str) -> int:
    client.cookies.clear()
    return client.get("/api/me", headers={"authorization": f"Bearer {key}"}).status_code


def test_a_key_revoked_before_the_outage_is_refused_during_it(
    cut_database: tuple[Link, str], tmp_path: Path
) -> None:
    link, through = cut_database
    settings, password = _gateway(through, tmp_path)
    names = ("revoked-unseen", "revoked-seen", "live")
    revoked_unseen, revoked_seen, live = (_new_key(settings, name) for name in names)
    with TestClient(app=create_app(settings)) as client:
        for key in (revoked_unseen, revoked_seen, live):
            assert _me(client, key) == 200  # each one's lookup is cached
        csrf = sign_in(client, ADMIN_EMAIL, password)
        keys = client.get("/api/admin/keys/").json()["items"]
        for item in (k for k in keys if k["name"].startswith("revoked")):
            revoke = client.post(
                f"/api/admin/keys/{item['id']}/revoke", headers={"x-csrf-token": csrf}
            )
            assert revoke.status_code == 200
        assert _me(client, revoked_seen) == 401  # this lookup saw the revocation
        assert _me(client, live) == 200  # looked up afresh after the admin write
        link.cut()
        # Seen revoked: known dead, refused as such. Revoked but not looked up since: its
        # last lookup predates an admin write, so it cannot vouch for the key.
        assert _me(client, revoked_seen) == 401
        assert _me(client, revoked_unseen) == 503
        assert _me(client, live) == 200  # a key validated moments ago keeps working
        link.restore()
        assert _me(client, revoked_unseen) == 401


def test_a_key_validated_longer_ago_than_the_grace_is_refused_during_an_outage(
    cut_database: tuple[Link, str], tmp_path: Path
) -> None:
    link, through = cut_database
    settings, _ = _gateway(through, tmp_path, key_outage_grace_seconds=3)
    old, recent = _new_key(settings), _new_key(settings)
    with TestClient(app=create_app(settings)) as client:
        assert _me(client, old) == 200
        time.sleep(3.5)
        assert _me(client, recent) == 200
        link.cut()
        assert _me(client, recent) == 200
        refused = client.get("/api/me", headers={"authorization": f"Bearer {old}"})
        assert refused.status_code == 503 and "database" in refused.json()["detail"]
        link.restore()
        assert _me(client, old) == 200
