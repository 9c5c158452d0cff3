"""`?q=` on the admin lists: users (with department, role and active filters), departments
and keys; a case-insensitive substring, still keyset-paginated, and only for admins."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from gateway.db.engine import create_engine, session_factory
from gateway.db.models import User
from tests.gateway.admin.conftest import MEMBER_EMAIL, Console
from tests.gateway.helpers import ADMIN_EMAIL

PEOPLE = [
    # email, name, role, active
    ("ada.lovelace@example.test", "Ada Lovelace", "member", True),
    ("alan.turing@example.test", "Alan Turing", "member", False),
    ("grace@navy.example.test", "Grace HOPPER", "admin", True),
    ("edsger@example.test", "Edsger Dijkstra 100%_sure", "member", True),
]


def add_people(database_url: str, department_id: str) -> None:
    async def run() -> None:
        engine = create_engine(database_url)
        try:
            async with session_factory(engine).begin() as db:
                for email, name, role, active in PEOPLE:
                    # Ada and Alan are in the department.
                    department = uuid.UUID(department_id) if email[0] == "a" else None
                    subject = f"https://idp.test|{email}"
                    row = User(subject=subject, email=email, name=name, role=role)
                    row.is_active, row.department_id = active, department
                    db.add(row)
        finally:
            await engine.dispose()

    asyncio.run(run())


def emails(console: Console, **params: Any) -> list[str]:
    reply = console.client.get("/api/admin/users", params=params)
    assert reply.status_code == 200, reply.text
    return sorted(u["email"] for u in reply.json()["items"])


def test_users_search_by_email_or_name_with_filters_and_pages(console: Console) -> None:
    writes = console.writes
    ops = console.client.post(
        "/api/admin/departments", json={"name": "Ops", "slug": "ops"}, headers=writes
    ).json()
    add_people(console.gateway.settings.effective_database_url, ops["id"])

    # Substring of the email or the name, in any case.
    assert emails(console, q="LOVE") == ["ada.lovelace@example.test"]
    assert emails(console, q="hopper") == ["grace@navy.example.test"]
    assert emails(console, q="navy.EX") == ["grace@navy.example.test"]
    assert emails(console, q="  turing ") == ["alan.turing@example.test"]
    # The pattern characters are text: "%" and "_" match only themselves.
    assert emails(console, q="100%_s") == ["edsger@example.test"]
    assert emails(console, q="%") == ["edsger@example.test"]
    assert emails(console, q="_") == ["edsger@example.test"]
    assert emails(console, q="nobody") == []
    # Blank q: everyone.
    assert len(emails(console, q="")) == len(PEOPLE) + 2

    # Filters, alone and with q.
    assert emails(console, department_id=ops["id"]) == [
        "ada.lovelace@example.test",
        "alan.turing@example.test",
    ]
    assert emails(console, department_id=ops["id"], is_active="true") == [
        "ada.lovelace@example.test"
    ]
    assert emails(console, is_active="false") == ["alan.turing@example.test"]
    admins = emails(console, role="admin")
    assert "grace@navy.example.test" in admins and ADMIN_EMAIL in admins
    assert emails(console, role="admin", q="example.test") == sorted(
        [ADMIN_EMAIL, MEMBER_EMAIL, "grace@navy.example.test"]
    )

    # Still keyset pages: every match once, over pages of one.
    seen: list[str] = []
    params: dict[str, Any] = {"q": "example.test", "limit": 1}
    while True:
        page = console.client.get("/api/admin/users", params=params).json()
        seen += [u["email"] for u in page["items"]]
        if page["next_cursor"] is None:
            break
        params["after"] = page["next_cursor"]
    assert sorted(seen) == emails(console, q="example.test") and len(seen) == len(PEOPLE) + 2


@pytest.mark.parametrize(
    "params",
    [
        {"role": "owner"},
        {"is_active": "maybe"},
        {"department_id": "not-a-uuid"},
        {"q": "x" * 201},
        {"q": "a\x00b"},
        {"q": "a", "after": "nope"},
        {"q": "a", "limit": 0},
    ],
)
def test_bad_search_input_is_a_400(sqlite_console: Console, params: dict[str, Any]) -> None:
    takes = {
        "/api/admin/users": {"q", "after", "limit", "role", "is_active", "department_id"},
        "/api/admin/departments": {"q", "after", "limit"},
        "/api/admin/keys": {"q", "after", "limit", "department_id"},
    }
    for path, names in takes.items():
        if not set(params) <= names:
            continue
        reply = sqlite_console.client.get(path, params=params)
        assert reply.status_code == 400, (path, params, reply.text)


def test_departments_and_keys_search(console: Console) -> None:
    writes, client = console.writes, console.client
    made = {}
    for name, slug in [("Research Lab", "research"), ("Legal", "legal"), ("Labs Ops", "ops")]:
        reply = client.post(
            "/api/admin/departments", json={"name": name, "slug": slug}, headers=writes
        )
        made[slug] = reply.json()["id"]

    def names(path: str, q: str, **more: str) -> list[str]:
        reply = client.get(path, params={"q": q, **more})
        assert reply.status_code == 200, reply.text
        return sorted(item["name"] for item in reply.json()["items"])

    assert names("/api/admin/departments", "LAB") == ["Labs Ops", "Research Lab"]
    assert names("/api/admin/departments", "legal") == ["Legal"]  # the slug matches too

    keys = {}
    for name in ["CI pipeline", "Notebook", "ci-nightly"]:
        body = {"department_id": made["research"], "name": name}
        keys[name] = client.post("/api/admin/keys", json=body, headers=writes).json()
    assert names("/api/admin/keys", "ci") == ["CI pipeline", "ci-nightly"]
    prefix = keys["Notebook"]["api_key"]["display_prefix"]
    assert "Notebook" in names("/api/admin/keys", prefix)
    assert names("/api/admin/keys", "ci", department_id=made["legal"]) == []


def test_members_and_api_keys_are_refused(sqlite_console: Console) -> None:
    for path in ("/api/admin/users", "/api/admin/departments", "/api/admin/keys"):
        sqlite_console.refused_to_others("GET", f"{path}?q=a")
