"""The admin's assistants API: create, edit (versions), defaults, slugs, archive, guards."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from tests.gateway.assistants.conftest import PROMPT, SERVED, Office
from tests.gateway.traffic.conftest import read_records

TEMPLATE = {
    "type": "object",
    "properties": {"finding": {"type": "string"}, "severity": {"enum": ["low", "high"]}},
    "required": ["finding"],
}


def test_create_read_edit_makes_versions(office: Office) -> None:
    created = office.assistant(sampling={"temperature": 0.2}, response_template=TEMPLATE)
    assert created["slug"] == "quality-helper" and created["version"] == 1
    assert created["department_name"] == "Quality" and created["archived"] is False
    assert created["sampling"] == {"temperature": 0.2} and created["response_template"] == TEMPLATE
    assert created["model"] is None and created["prompt_tokens"] is None
    assert created["warm"] is None  # answered before the commit: no sync has seen it yet
    path = f"/api/admin/assistants/{created['id']}"
    read = office.admin.ok("GET", path)
    # The stub worker has no /v1/internal/prefixes: the warmer says why it is not cached.
    deadline = time.monotonic() + 10
    while read["warm"] is None or read["warm"]["state"] == "pending":
        assert time.monotonic() < deadline
        time.sleep(0.05)
        read = office.admin.ok("GET", path)
    assert read["warm"]["state"] == "failed" and "501" in read["warm"]["error"]
    assert {**read, "warm": None} == created

    renamed = office.admin.ok("PATCH", path, {"name": "Quality desk"})
    assert (renamed["name"], renamed["version"], renamed["slug"]) == (
        "Quality desk",
        1,
        created["slug"],
    )
    same = office.admin.ok(
        "PATCH", path, {"system_prompt": PROMPT, "sampling": {"temperature": 0.2}}
    )
    assert same["version"] == 1  # nothing it says changed

    edited = office.admin.ok("PATCH", path, {"system_prompt": PROMPT + " Cite the section."})
    assert edited["version"] == 2 and edited["system_prompt"].endswith("Cite the section.")
    assert edited["response_template"] == TEMPLATE  # the rest carried over
    cleared = office.admin.ok("PATCH", path, {"sampling": None, "model": SERVED})
    assert (cleared["version"], cleared["sampling"], cleared["model"]) == (3, None, SERVED)

    versions = office.admin.ok("GET", f"{path}/versions")["items"]
    assert [v["version"] for v in versions] == [3, 2, 1]
    assert versions[2]["system_prompt"] == PROMPT and versions[2]["sampling"] == {
        "temperature": 0.2
    }
    assert versions[0]["created_by"] is not None

    listed = office.admin.ok("GET", "/api/admin/assistants", department_id=office.quality)
    assert [a["id"] for a in listed["items"]] == [created["id"]] and listed["next_cursor"] is None
    assert (
        office.admin.ok("GET", "/api/admin/assistants", department_id=office.legal)["items"] == []
    )
    assert len(office.admin.ok("GET", "/api/admin/assistants", q="DESK")["items"]) == 1
    assert office.admin.ok("GET", "/api/admin/assistants", q="nothing")["items"] == []


def test_pages(office: Office) -> None:
    made = {office.assistant(f"Helper {i}")["id"] for i in range(5)}
    first = office.admin.ok("GET", "/api/admin/assistants", limit=3)
    second = office.admin.ok("GET", "/api/admin/assistants", limit=3, after=first["next_cursor"])
    assert len(first["items"]) == 3 and second["next_cursor"] is None
    assert {a["id"] for a in first["items"] + second["items"]} == made


def test_one_default_per_department(office: Office) -> None:
    first = office.assistant("First", is_default=True)
    other = office.admin.ok(
        "POST",
        "/api/admin/assistants",
        {"department_id": office.legal, "name": "Legal", "system_prompt": "x", "is_default": True},
    )
    second = office.assistant("Second", is_default=True)
    defaults = {
        a["name"]: a["is_default"] for a in office.admin.ok("GET", "/api/admin/assistants")["items"]
    }
    assert defaults == {"First": False, "Second": True, "Legal": True}  # legal's is its own
    office.admin.ok("PATCH", f"/api/admin/assistants/{first['id']}", {"is_default": True})
    assert office.admin.ok("GET", f"/api/admin/assistants/{second['id']}")["is_default"] is False
    assert office.admin.ok("GET", f"/api/admin/assistants/{other['id']}")["is_default"] is True
    office.admin.ok("PATCH", f"/api/admin/assistants/{first['id']}", {"is_default": False})
    after = office.admin.ok("GET", "/api/admin/assistants", department_id=office.quality)["items"]
    assert not any(a["is_default"] for a in after)


def test_slugs(office: Office) -> None:
    assert office.assistant("Qualité: Rapports 8D")["slug"] == "qualite-rapports-8d"
    assert office.assistant("Qualité: rapports 8D!")["slug"] == "qualite-rapports-8d-2"
    assert office.assistant("Qualité rapports 8D")["slug"] == "qualite-rapports-8d-3"
    assert office.assistant("???")["slug"] == "assistant"
    # A name that is a served model's: the derived slug steps around it.
    assert office.assistant("Tiny")["slug"] == f"{SERVED}-2"
    assert office.assistant("Chosen", slug="my-helper")["slug"] == "my-helper"
    long = office.assistant("x" * 200)["slug"]
    assert long == "x" * 63 and office.assistant("x" * 200)["slug"] == "x" * 61 + "-2"

    def refused(slug: Any, status: int) -> str:
        body = {"department_id": office.legal, "name": "n", "system_prompt": "p", "slug": slug}
        reply = office.admin.call("POST", "/api/admin/assistants", body)
        assert reply.status_code == status, (slug, reply.text)
        return str(reply.json()["detail"])

    assert "taken" in refused("my-helper", 409)  # in any department
    assert "model" in refused(SERVED, 409)
    for bad in ("My-Helper", "-lead", "a_b", "a" * 64, "", "ü", 12):
        refused(bad, 400)


def test_archive_hides_it_but_keeps_its_slug(office: Office) -> None:
    created = office.assistant(is_default=True)
    path = f"/api/admin/assistants/{created['id']}"
    reply = office.admin.call("DELETE", path)
    assert reply.status_code == 204 and not reply.content
    assert office.admin.call("DELETE", path).status_code == 204  # again: still archived
    shown = office.admin.ok("GET", path)
    assert shown["archived"] is True and shown["is_default"] is False
    assert office.admin.ok("GET", "/api/admin/assistants")["items"] == []
    listed = office.admin.ok("GET", "/api/admin/assistants", include_archived="true")["items"]
    assert [a["id"] for a in listed] == [created["id"]]
    assert office.alice.ok("GET", "/api/assistants")["items"] == []
    edit = office.admin.call("PATCH", path, {"name": "Back"})
    assert edit.status_code == 400 and "archived" in edit.json()["detail"]
    # Its slug is never handed out again.
    assert office.assistant()["slug"] == "quality-helper-2"


def test_unknown_ids_and_departments(office: Office) -> None:
    nobody = "00000000-0000-4000-8000-000000000000"
    for method, path in (
        ("GET", f"/api/admin/assistants/{nobody}"),
        ("PATCH", f"/api/admin/assistants/{nobody}"),
        ("DELETE", f"/api/admin/assistants/{nobody}"),
        ("GET", f"/api/admin/assistants/{nobody}/versions"),
    ):
        reply = office.admin.call(method, path, {} if method == "PATCH" else None)
        assert reply.status_code == 404, (method, reply.text)
    body = {"department_id": nobody, "name": "n", "system_prompt": "p"}
    assert office.admin.call("POST", "/api/admin/assistants", body).status_code == 404


def test_members_are_refused_the_admin_routes(office: Office) -> None:
    created = office.assistant()
    path = f"/api/admin/assistants/{created['id']}"
    body = {"department_id": office.quality, "name": "n", "system_prompt": "p"}
    for method, where, sent in (
        ("GET", "/api/admin/assistants", None),
        ("POST", "/api/admin/assistants", body),
        ("GET", path, None),
        ("PATCH", path, {"name": "mine now"}),
        ("DELETE", path, None),
        ("GET", f"{path}/versions", None),
        ("POST", "/api/admin/assistants/tokens", {"text": "hello"}),
    ):
        reply = office.alice.call(method, where, sent)
        assert reply.status_code == 403, (method, where, reply.text)
    assert office.admin.ok("GET", path)["name"] == created["name"]


def test_admin_actions_are_audited_without_the_prompt_text(office: Office) -> None:
    created = office.assistant()
    path = f"/api/admin/assistants/{created['id']}"
    office.admin.ok("PATCH", path, {"system_prompt": "Changed."})
    office.admin.call("DELETE", path)
    wanted = ["assistant.create", "assistant.update", "assistant.archive"]
    deadline = time.monotonic() + 10
    while True:
        rows = asyncio.run(read_records(office.database_url, None))
        actions = [r for r in rows if r["action"].startswith("assistant.")]
        if len(actions) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert [r["action"] for r in actions] == wanted
    assert all(r["target_id"] == created["id"] for r in actions)
    update = actions[1]["details"]
    assert PROMPT not in update and "Changed." not in update
    assert hashlib.sha256(b"Changed.").hexdigest() in update
