"""What the admin's assistants API refuses: each a 400 that says what is wrong, never a 500."""

from __future__ import annotations

from typing import Any

from tests.gateway.assistants.conftest import Office

MAX = 256 * 1024
OBJECT = {"type": "object", "properties": {"a": {"type": "string"}}}


def _nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


BAD_FIELDS: list[tuple[str, Any, str]] = [
    ("system_prompt", "x" * (MAX + 1), "system_prompt"),
    ("system_prompt", "", "system_prompt"),
    ("system_prompt", "   \n", "empty"),
    ("system_prompt", "a\x00b", "system_prompt"),
    ("system_prompt", ["a list"], "system_prompt"),
    ("name", "   ", "name"),
    ("name", "n" * 201, "name"),
    ("model", "other", "no worker serves"),
    ("model", "", "model"),
    ("sampling", {"temperature": 2.5}, "temperature"),
    ("sampling", {"temperature": -0.1}, "temperature"),
    ("sampling", {"top_p": 0}, "top_p"),
    ("sampling", {"top_p": 1.01}, "top_p"),
    ("sampling", {"max_tokens": 0}, "max_tokens"),
    ("sampling", {"max_tokens": 2**31}, "max_tokens"),
    ("sampling", {"seed": 1}, "seed"),
    ("sampling", [0.2], "sampling"),
    ("response_template", {"type": "string"}, "object"),
    ("response_template", {"type": "object"}, "properties"),
    ("response_template", {"type": "object", "properties": {}}, "properties"),
    ("response_template", {"type": "object", "properties": []}, "properties"),
    ("response_template", {**OBJECT, "required": ["b"]}, "required"),
    ("response_template", {**OBJECT, "required": "a"}, "required"),
    ("response_template", {"type": "object", "properties": {"a": 3}}, "properties.a"),
    ("response_template", {"type": "object", "properties": {"a": {"type": "text"}}}, "type"),
    ("response_template", {"type": "object", "properties": {"a": {"$ref": "http://x"}}}, "$ref"),
    ("response_template", {**OBJECT, "title": "t\x00"}, "NUL"),
    ("response_template", {**OBJECT, "description": "d" * (70 * 1024)}, "bytes"),
    ("response_template", _nested(40), "nested"),
    ("response_template", [OBJECT], "response_template"),
    ("response_template", "{}", "response_template"),
    ("is_default", "yes", "is_default"),
    ("unknown", 1, "unknown"),
]


def test_bad_fields_are_400s_on_create_and_edit(sqlite_office: Office) -> None:
    office = sqlite_office
    assistant = office.assistant()
    path = f"/api/admin/assistants/{assistant['id']}"
    for field, value, said in BAD_FIELDS:
        body = {"department_id": office.quality, "name": "n", "system_prompt": "p", field: value}
        created = office.admin.call("POST", "/api/admin/assistants", body)
        assert created.status_code == 400, (field, value, created.text)
        assert said in created.json()["detail"], (field, created.text)
        edit = office.admin.call("PATCH", path, {field: value})
        assert edit.status_code == 400, (field, value, edit.text)
    assert office.admin.ok("GET", path)["version"] == 1
    assert len(office.admin.ok("GET", "/api/admin/assistants")["items"]) == 1


def test_a_department_limits_the_models(sqlite_office: Office) -> None:
    office = sqlite_office
    office.admin.ok("PATCH", f"/api/admin/departments/{office.quality}", {"allowed_models": ["x"]})
    body = {"department_id": office.quality, "name": "n", "system_prompt": "p", "model": "tiny"}
    refused = office.admin.call("POST", "/api/admin/assistants", body)
    assert refused.status_code == 400 and "may not use" in refused.json()["detail"]


BAD_BODIES = [
    b"[]",
    b"null",
    b'{"department_id": "not-a-uuid", "name": "n", "system_prompt": "p"}',
    b'{"name": "n", "system_prompt": "p"}',
    b'{"department_id": 1, "name": "n", "system_prompt": "p"}',
    b"{nope",
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
]


def test_bad_bodies_are_400s(sqlite_office: Office) -> None:
    for raw in BAD_BODIES:
        reply = sqlite_office.admin.call("POST", "/api/admin/assistants", content=raw)
        assert reply.status_code == 400, (raw[:40], reply.text)


def test_bad_queries_are_400s(sqlite_office: Office) -> None:
    admin = sqlite_office.admin
    for name, value in (
        ("limit", "0"),
        ("limit", "201"),
        ("after", "nope"),
        ("department_id", "nope"),
        ("include_archived", "maybe"),
        ("q", "x" * 201),
    ):
        query: dict[str, Any] = {name: value}
        reply = admin.call("GET", "/api/admin/assistants", **query)
        assert reply.status_code == 400, (name, reply.text)
    sqlite_office.assistant("100 percent")
    assert admin.ok("GET", "/api/admin/assistants", q="100%_")["items"] == []
    assert len(admin.ok("GET", "/api/admin/assistants", q="100 p")["items"]) == 1
