"""What a department's people see of its assistants, and the conversations they start with
one: their own department's active assistants only."""

from __future__ import annotations

from tests.gateway.assistants.conftest import Office

TEMPLATE = {"type": "object", "properties": {"finding": {"type": "string"}}}


def test_cards_are_the_departments_active_assistants(office: Office) -> None:
    office.assistant("Zeta")
    office.assistant("alpha", sampling={"max_tokens": 300}, response_template=TEMPLATE)
    default = office.assistant("Middle", is_default=True)
    archived = office.assistant("Gone")
    office.admin.call("DELETE", f"/api/admin/assistants/{archived['id']}")
    office.admin.ok(
        "POST",
        "/api/admin/assistants",
        {"department_id": office.legal, "name": "Contracts", "system_prompt": "Legal only."},
    )
    cards = office.alice.ok("GET", "/api/assistants")["items"]
    assert [c["name"] for c in cards] == ["Middle", "alpha", "Zeta"]  # default, then by name
    assert cards[0] == {
        "id": default["id"],
        "slug": "middle",
        "name": "Middle",
        "is_default": True,
        "version": 1,
        "model": None,
        "prompt_tokens": None,
        "response_template": None,
        "sampling": None,
    }
    assert cards[1]["sampling"] == {"max_tokens": 300} and cards[1]["response_template"] == TEMPLATE
    assert all("system_prompt" not in c for c in cards)
    assert [c["name"] for c in office.bob.ok("GET", "/api/assistants")["items"]] == ["Contracts"]
    # The admin has no department: no assistants of its own to use.
    assert office.admin.ok("GET", "/api/assistants")["items"] == []


def test_a_conversation_started_with_an_assistant(office: Office) -> None:
    assistant = office.assistant()
    created = office.alice.ok(
        "POST", "/api/conversations", {"assistant_id": assistant["id"], "title": "8D of March"}
    )
    ref = {"id": assistant["id"], "slug": "quality-helper", "name": "Quality helper", "version": 1}
    assert created["assistant"] == ref and created["model"] == "quality-helper"
    path = f"/api/conversations/{created['id']}"
    # A model sent beside the assistant is the assistant's slug all the same.
    other = office.alice.ok(
        "POST", "/api/conversations", {"assistant_id": assistant["id"], "model": "tiny"}
    )
    assert other["model"] == "quality-helper"

    office.admin.ok(
        "PATCH", f"/api/admin/assistants/{assistant['id']}", {"system_prompt": "New text."}
    )
    detail = office.alice.ok(
        "POST",
        f"{path}/messages",
        {
            "messages": [
                {"role": "user", "content": "Root cause?"},
                {"role": "assistant", "content": "The seal.", "assistant_version": 2},
            ]
        },
    )
    assert [m["assistant_version"] for m in detail["messages"]] == [None, 2]
    # The conversation keeps the version it was started with.
    assert detail["assistant"] == ref
    again = office.alice.ok("GET", path)
    assert again["assistant"] == ref and again["messages"] == detail["messages"]
    listed = office.alice.ok("GET", "/api/conversations")["items"]
    assert {c["id"]: c["assistant"] for c in listed} == {created["id"]: ref, other["id"]: ref}

    # Archived: the old conversations still name it; no new one can start with it.
    office.admin.call("DELETE", f"/api/admin/assistants/{assistant['id']}")
    assert office.alice.ok("GET", path)["assistant"] == ref
    refused = office.alice.call("POST", "/api/conversations", {"assistant_id": assistant["id"]})
    assert refused.status_code == 404, refused.text


def test_another_departments_assistant_does_not_exist_for_you(office: Office) -> None:
    assistant = office.assistant()
    for person in (office.bob, office.admin):
        reply = person.call("POST", "/api/conversations", {"assistant_id": assistant["id"]})
        assert reply.status_code == 404 and reply.json()["detail"] == "no such assistant"
    nobody = "00000000-0000-4000-8000-000000000000"
    reply = office.alice.call("POST", "/api/conversations", {"assistant_id": nobody})
    assert reply.status_code == 404 and reply.json()["detail"] == "no such assistant"
    assert office.bob.ok("GET", "/api/conversations")["items"] == []


def test_conversation_inputs(office: Office) -> None:
    plain = office.alice.new()
    assert plain["assistant"] is None and plain["model"] == "tiny"
    for body in ({}, {"model": ""}, {"assistant_id": "nope"}, {"assistant_id": 3}):
        reply = office.alice.call("POST", "/api/conversations", body)
        assert reply.status_code == 400, (body, reply.text)
    path = f"/api/conversations/{plain['id']}/messages"
    for message, said in (
        ({"role": "assistant", "content": "a", "assistant_version": 1}, "not started"),
        ({"role": "user", "content": "a", "assistant_version": 1}, "assistant messages only"),
        ({"role": "assistant", "content": "a", "assistant_version": 0}, "assistant_version"),
        ({"role": "assistant", "content": "a", "assistant_version": "1"}, "assistant_version"),
    ):
        reply = office.alice.call("POST", path, {"messages": [message]})
        assert reply.status_code == 400 and said in reply.json()["detail"], reply.text
    assert office.alice.ok("GET", f"/api/conversations/{plain['id']}")["messages"] == []
