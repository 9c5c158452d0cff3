"""Hostile input to the conversations API: a clear 400, never a 5xx, nothing stored."""

from __future__ import annotations

import base64

from gateway.domain.conversations.schemas import MAX_APPEND, MAX_TEXT_CHARS
from tests.gateway.conversations.people import People

Backend = tuple[str, People]


def test_bodies_past_the_limits_or_with_nul_are_refused(backend: Backend) -> None:
    _, people = backend
    alice = people.alice
    mine = alice.new(title="target")
    path = f"/api/conversations/{mine['id']}"
    megabyte = "x" * 1_000_000

    def message(**fields: object) -> dict[str, object]:
        return {"messages": [{"role": "user", "content": "hi", **fields}]}

    refused = [
        ("POST", "/api/conversations", {"model": "tiny", "title": "a\x00b"}),
        ("POST", "/api/conversations", {"model": "tiny", "system_prompt": "\x00"}),
        ("POST", "/api/conversations", {"model": "tiny", "title": "t" * 201}),
        ("POST", "/api/conversations", {"model": "m" * 201}),
        ("POST", "/api/conversations", {"title": "no model"}),
        ("POST", "/api/conversations", {"model": "tiny", "owner": "bob"}),
        ("POST", "/api/conversations", {"model": "tiny", "system_prompt": megabyte}),
        ("PATCH", path, {"title": "\x00"}),
        ("PATCH", path, {"user_id": "00000000-0000-0000-0000-000000000000"}),
        ("POST", f"{path}/messages", message(content="nul \x00 inside")),
        ("POST", f"{path}/messages", message(content=megabyte)),
        ("POST", f"{path}/messages", message(content="y" * (MAX_TEXT_CHARS + 1))),
        ("POST", f"{path}/messages", message(role="system")),
        ("POST", f"{path}/messages", message(usage={"prompt_tokens": 1})),  # a user's
        ("POST", f"{path}/messages", {"messages": []}),
        (
            "POST",
            f"{path}/messages",
            {"messages": [{"role": "user", "content": "m"}] * (MAX_APPEND + 1)},
        ),
        ("POST", f"{path}/truncate", {"from_position": -1}),
        ("POST", f"{path}/truncate", {"from_position": 2**40}),
    ]
    for method, url, body in refused:
        response = alice.call(method, url, body)
        assert response.status_code == 400, (method, url, str(body)[:80], response.text)
        assert set(response.json()) == {"status_code", "detail"}
    # A lone surrogate is no text either (Postgres could not store it as UTF-8).
    for method, url, raw in [
        ("POST", "/api/conversations", b'{"model": "tiny", "title": "\\ud800"}'),
        ("PATCH", path, b'{"system_prompt": "\\udfff"}'),
        ("POST", f"{path}/messages", b'{"messages": [{"role": "user", "content": "\\ud800"}]}'),
    ]:
        response = alice.call(method, url, content=raw)
        assert 400 <= response.status_code < 500, (method, url, response.text)
    kept = alice.ok("GET", path)
    assert (kept["title"], kept["messages"]) == ("target", [])
    # Exactly at the cap is fine.
    at_cap = message(content="z" * MAX_TEXT_CHARS)
    assert len(alice.ok("POST", f"{path}/messages", at_cap)["messages"]) == 1


def test_bad_paging_and_search_parameters_are_400(backend: Backend) -> None:
    _, people = backend
    alice = people.alice
    alice.new()
    forged = base64.urlsafe_b64encode(b"2026-01-01T00:00:00|not-a-uuid").decode()
    naive = base64.urlsafe_b64encode(
        b"2026-01-01T00:00:00|00000000-0000-0000-0000-000000000000"
    ).decode()
    lists = [
        {"limit": "0"},
        {"limit": "201"},
        {"limit": str(10**30)},
        {"limit": "ten"},
        {"after": "garbage"},
        {"after": "%%%"},
        {"after": forged},
        {"after": naive},
        {"after": "A" * 5000},
        {"after": "\x00"},
    ]
    for params in lists:
        response = alice.call("GET", "/api/conversations", **params)
        assert response.status_code == 400, (params, response.text)
    searches = [
        {},
        {"q": ""},
        {"q": "   "},
        {"q": "w" * 501},
        {"q": "nul\x00"},
        {"q": "torque", "limit": "0"},
        {"q": "torque", "limit": "101"},
        {"q": "torque", "limit": str(10**30)},
    ]
    for params in searches:
        response = alice.call("GET", "/api/conversations/search", **params)
        assert response.status_code == 400, (params, response.text)
    assert alice.call("GET", "/api/conversations/not-a-uuid").status_code == 404


def test_search_syntax_in_the_query_is_only_text(backend: Backend) -> None:
    """FTS5 operators and quotes: no syntax error (a 500 on SQLite if they reached MATCH),
    and a word that is an operator is searched for as a word."""
    _, people = backend
    alice = people.alice
    mine = alice.new(title="operators")
    text = 'use NEAR or OR and AND, "quoted words", star* and col: and (brackets) ^caret'
    alice.ok(
        "POST",
        f"/api/conversations/{mine['id']}/messages",
        {"messages": [{"role": "user", "content": text}]},
    )
    hostile = [
        '"',
        '""',
        '"unclosed',
        "*",
        "star*",
        "NEAR(",
        "NEAR(use and)",
        "OR",
        "AND",
        "NOT",
        "use OR nothing",
        "- use",
        "content:use",
        "col:",
        "(brackets",
        "^caret",
        "{x y}",
        "'; DROP TABLE conversations; --",
        "\\",
        "%",
        "_",
        "a" * 500,
        "🙂 emoji",
    ]
    for q in hostile:
        response = alice.call("GET", "/api/conversations/search", q=q)
        assert response.status_code == 200, (q, response.text)
    for q in ("NEAR", "OR", "quoted", '"quoted words"', "brackets", "caret", "star"):
        hits = alice.ok("GET", "/api/conversations/search", q=q)["items"]
        assert [h["position"] for h in hits] == [0], q
    assert alice.ok("GET", "/api/conversations")["items"][0]["title"] == "operators"
