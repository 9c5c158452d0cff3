"""The conversations API for one user: create, read, rename, append, truncate, delete."""

from __future__ import annotations

import uuid

from tests.gateway.conversations.people import People

Backend = tuple[str, People]


def test_a_conversation_from_first_message_to_deletion(backend: Backend) -> None:
    _, people = backend
    alice = people.alice
    created = alice.new(model="tiny", system_prompt="Answer from the quality manual.")
    assert (created["title"], created["model"]) == ("", "tiny")
    assert created["system_prompt"] == "Answer from the quality manual."
    path = f"/api/conversations/{created['id']}"

    first = [
        {"role": "user", "content": "How often is the torque wrench calibrated?"},
        {
            "role": "assistant",
            "content": "Yearly.",
            "usage": {"prompt_tokens": 31, "completion_tokens": 3, "model": "tiny"},
        },
    ]
    after_first = alice.ok("POST", f"{path}/messages", {"messages": first})
    assert [(m["position"], m["role"], m["content"]) for m in after_first["messages"]] == [
        (0, "user", first[0]["content"]),
        (1, "assistant", "Yearly."),
    ]
    assert after_first["messages"][0]["usage"] is None
    assert after_first["messages"][1]["usage"] == first[1]["usage"]
    assert after_first["updated_at"] > created["updated_at"]

    # Edit the first message and rerun: truncate from it, append the edited one.
    cut = alice.ok("POST", f"{path}/truncate", {"from_position": 0})
    assert cut["messages"] == [] and cut["updated_at"] > after_first["updated_at"]
    edited = {"role": "user", "content": "How often is the caliper calibrated?"}
    again = alice.ok("POST", f"{path}/messages", {"messages": [edited]})
    assert [(m["position"], m["content"]) for m in again["messages"]] == [(0, edited["content"])]
    # Regenerate: drop the answer only.
    alice.ok("POST", f"{path}/messages", {"messages": [{"role": "assistant", "content": "1"}]})
    alice.ok("POST", f"{path}/truncate", {"from_position": 1})
    alice.ok("POST", f"{path}/messages", {"messages": [{"role": "assistant", "content": "2"}]})
    shown = alice.ok("GET", path)
    assert [(m["position"], m["content"]) for m in shown["messages"]] == [
        (0, edited["content"]),
        (1, "2"),
    ]
    # Truncating past the end removes nothing.
    assert len(alice.ok("POST", f"{path}/truncate", {"from_position": 9})["messages"]) == 2

    renamed = alice.ok("PATCH", path, {"title": "Calibration", "model": "big"})
    assert (renamed["title"], renamed["model"]) == ("Calibration", "big")
    assert renamed["system_prompt"] == created["system_prompt"]  # absent: unchanged
    assert alice.ok("PATCH", path, {"system_prompt": ""})["system_prompt"] == ""
    assert alice.ok("GET", "/api/conversations")["items"][0]["title"] == "Calibration"

    assert alice.call("DELETE", path).status_code == 204
    assert alice.call("GET", path).status_code == 404
    assert alice.ok("GET", "/api/conversations")["items"] == []
    assert alice.ok("GET", "/api/conversations/search", q="caliper")["items"] == []


def test_another_users_conversation_is_not_found_whoever_asks(backend: Backend) -> None:
    """Bob (and the admin) guessing Alice's ids: every route answers exactly as for an id
    that does not exist, and Alice's conversation is unchanged afterwards."""
    _, people = backend
    alice, bob = people.alice, people.bob
    secret = alice.new(title="Salary review")
    path = f"/api/conversations/{secret['id']}"
    alice.ok("POST", f"{path}/messages", {"messages": [{"role": "user", "content": "raise"}]})
    bob.new(title="Bob's own")
    nowhere = f"/api/conversations/{uuid.uuid4()}"

    attempts = [
        ("GET", "", None),
        ("PATCH", "", {"title": "mine now"}),
        ("POST", "/messages", {"messages": [{"role": "user", "content": "injected"}]}),
        ("POST", "/truncate", {"from_position": 0}),
        ("DELETE", "", None),
    ]
    for guesser in (bob, people.admin):
        for method, suffix, body in attempts:
            theirs = guesser.call(method, path + suffix, body)
            missing = guesser.call(method, nowhere + suffix, body)
            assert theirs.status_code == missing.status_code == 404, (method, suffix)
            assert theirs.json() == missing.json()
        listed = guesser.ok("GET", "/api/conversations")["items"]
        assert secret["id"] not in {c["id"] for c in listed}
        for q in ("raise", "salary"):
            assert guesser.ok("GET", "/api/conversations/search", q=q)["items"] == []

    kept = alice.ok("GET", path)
    assert kept["title"] == "Salary review"
    assert [m["content"] for m in kept["messages"]] == ["raise"]
    assert [c["title"] for c in bob.ok("GET", "/api/conversations")["items"]] == ["Bob's own"]
    assert {
        h["conversation_id"]
        for h in alice.ok("GET", "/api/conversations/search", q="raise")["items"]
    } == {secret["id"]}


def test_writes_need_the_sessions_csrf_token(backend: Backend) -> None:
    _, people = backend
    alice = people.alice
    mine = alice.new(title="kept")
    path = f"/api/conversations/{mine['id']}"
    writes = [
        ("POST", "/api/conversations", {"model": "tiny"}),
        ("PATCH", path, {"title": "changed"}),
        ("POST", f"{path}/messages", {"messages": [{"role": "user", "content": "x"}]}),
        ("POST", f"{path}/truncate", {"from_position": 0}),
        ("DELETE", path, None),
    ]
    for method, url, body in writes:
        assert alice.call(method, url, body, csrf=False).status_code == 403, (method, url)
    assert [c["title"] for c in alice.ok("GET", "/api/conversations")["items"]] == ["kept"]
    assert alice.ok("GET", path)["messages"] == []
