"""The list: newest-updated first, every conversation exactly once across pages, even where
many share one updated_at (ties are ordered by id)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.gateway.conversations.conftest import set_updated_at
from tests.gateway.conversations.people import People, Person

Backend = tuple[str, People]


def all_pages(person: Person, limit: int) -> tuple[list[str], int]:
    ids: list[str] = []
    pages = 0
    params: dict[str, Any] = {"limit": str(limit)}
    while True:
        page = person.ok("GET", "/api/conversations", **params)
        pages += 1
        assert len(page["items"]) <= limit
        ids += [c["id"] for c in page["items"]]
        if page["next_cursor"] is None:
            return ids, pages
        params["after"] = page["next_cursor"]


def test_pages_cross_ties_in_updated_at_without_repeats_or_gaps(backend: Backend) -> None:
    database_url, people = backend
    alice = people.alice
    made = [alice.new(title=f"c{i}")["id"] for i in range(9)]
    people.bob.new(title="not alice's")
    tie = datetime(2026, 12, 1, 9, 30, 0, 123456, tzinfo=UTC)
    set_updated_at(database_url, made[1:7], tie)  # six in one microsecond
    set_updated_at(database_url, made[7:8], datetime(2026, 11, 30, tzinfo=UTC))
    listed = alice.ok("GET", "/api/conversations", limit="200")["items"]
    moments = {c["id"]: c["updated_at"] for c in listed}
    # UUID order is hex order on both databases (Postgres' bytes, SQLite's hex text).
    expected = sorted(made, key=lambda i: (moments[i], i), reverse=True)
    assert [c["id"] for c in listed] == expected
    assert expected[0] in (made[0], made[8]) and expected[-1] == made[7]

    for limit in (1, 2, 4, 5, 9, 10):
        ids, pages = all_pages(alice, limit)
        assert ids == expected, limit
        assert pages == -(-len(made) // limit)  # the look-ahead row: no empty last page

    # A write moves a conversation to the front; its old place is not shown twice.
    alice.ok("PATCH", f"/api/conversations/{made[7]}", {"title": "touched"})
    ids, _ = all_pages(alice, 3)
    assert ids[0] == made[7] and sorted(ids) == sorted(made)
    assert all_pages(people.bob, 3)[0] != ids
