"""Each assistants test runs on both databases (the embedded SQLite file, and a fresh,
migrated Postgres database, dropped after), with two departments, a member in each, the
admin, and a stub worker that lists the model "tiny" (so that slugs can collide with it)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.conversations.people import Person, people
from tests.gateway.helpers import Gateway, client_for, embedded_gateway
from tests.gateway.postgres import fresh_postgres
from tests.gateway.workers.conftest import TOKEN, StubWorker

SERVED = "tiny"
PROMPT = "You answer quality questions about our 8D reports, briefly and precisely."


@dataclass
class Office:
    """The admin, Alice (in quality) and Bob (in legal), on one client."""

    admin: Person
    alice: Person
    bob: Person
    quality: str  # department ids
    legal: str
    database_url: str

    def assistant(self, name: str = "Quality helper", **fields: Any) -> dict[str, Any]:
        body = {"department_id": self.quality, "name": name, "system_prompt": PROMPT, **fields}
        created: dict[str, Any] = self.admin.ok("POST", "/api/admin/assistants", body)
        return created


@pytest.fixture
def stub_worker() -> Iterator[StubWorker]:
    worker = StubWorker([SERVED])
    worker.start()
    yield worker
    worker.stop()


@contextlib.contextmanager
def office_on(gateway: Gateway) -> Iterator[Office]:
    """The office on ``gateway``, its app running until the block ends."""
    with client_for(gateway) as client:
        group = people(client, gateway)
        admin = group.admin
        ids = []
        for slug in ("quality", "legal"):
            made = admin.ok("POST", "/api/admin/departments", {"name": slug.title(), "slug": slug})
            ids.append(made["id"])
        users = admin.ok("GET", "/api/admin/users")["items"]
        for email, department in (("alice@example.test", ids[0]), ("bob@example.test", ids[1])):
            user_id = next(u["id"] for u in users if u["email"] == email)
            admin.ok("PATCH", f"/api/admin/users/{user_id}", {"department_id": department})
        yield Office(
            admin, group.alice, group.bob, ids[0], ids[1], gateway.settings.effective_database_url
        )


@pytest.fixture(params=["sqlite", "postgres"])
def office(
    request: pytest.FixtureRequest, tmp_path: Path, stub_worker: StubWorker
) -> Iterator[Office]:
    options = {"workers": stub_worker.url, "worker_token": TOKEN}
    if request.param == "sqlite":
        with office_on(embedded_gateway(tmp_path, **options)) as made:
            yield made
        return
    with (
        fresh_postgres(request.getfixturevalue("database_url"), "enclave_assist") as url,
        office_on(embedded_gateway(tmp_path, database_url=url, **options)) as made,
    ):
        yield made


@pytest.fixture
def sqlite_office(tmp_path: Path, stub_worker: StubWorker) -> Iterator[Office]:
    options = {"workers": stub_worker.url, "worker_token": TOKEN}
    with office_on(embedded_gateway(tmp_path, **options)) as made:
        yield made
