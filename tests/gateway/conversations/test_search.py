"""Full-text search over one's own messages and titles: best matches first, plain-text
snippets around the match, kept in step with edits, truncation and deletion."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from gateway.db import migrate
from gateway.db.engine import create_engine
from gateway.domain.conversations import search
from tests.gateway.conversations.people import People, Person, people
from tests.gateway.helpers import client_for, embedded_gateway
from tests.gateway.postgres import fresh_postgres

Backend = tuple[str, People]


def say(person: Person, conversation_id: str, *contents: str) -> None:
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": c} for i, c in enumerate(contents)]
    person.ok("POST", f"/api/conversations/{conversation_id}/messages", {"messages": messages})


def hits(person: Person, q: str, **params: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = person.ok("GET", "/api/conversations/search", q=q, **params)[
        "items"
    ]
    return found


def test_best_matches_first_with_snippets_and_titles(backend: Backend) -> None:
    _, people = backend
    alice, bob = people.alice, people.bob
    dense = alice.new(title="Workshop")["id"]
    sparse = alice.new(title="Misc")["id"]
    titled = alice.new(title="Torque specifications")["id"]
    say(alice, dense, "hello", "Torque: set the torque wrench to the torque in the torque table.")
    filler = " ".join(f"word{i}" for i in range(120))
    say(alice, sparse, f"{filler} and once the torque is mentioned {filler}")
    theirs = bob.new(title="Torque for Bob")["id"]
    say(bob, theirs, "torque torque torque torque torque")

    found = hits(alice, "torque")
    assert {h["conversation_id"] for h in found} == {dense, sparse, titled}
    assert (found[0]["conversation_id"], found[0]["position"]) == (dense, 1)
    assert found[0]["title"] == "Workshop"
    message_hits = [h for h in found if h["position"] is not None]
    assert [h["conversation_id"] for h in message_hits] == [dense, sparse]
    title_hit = next(h for h in found if h["conversation_id"] == titled)
    assert title_hit["position"] is None and "Torque" in title_hit["snippet"]

    # The snippet is a short stretch of plain text around the match, not the message.
    snippet = next(h for h in found if h["conversation_id"] == sparse)["snippet"]
    assert "torque" in snippet and "<" not in snippet
    assert len(snippet.split()) <= 20 < len(filler.split())

    assert [h["conversation_id"] for h in hits(alice, "TORQUE", limit="1")] == [dense]
    # Every word must match; a quoted phrase matches in order.
    assert {h["conversation_id"] for h in hits(alice, "torque mentioned")} == {sparse}
    assert [h["conversation_id"] for h in hits(alice, '"torque wrench"')] == [dense]
    assert hits(alice, '"wrench torque"') == []
    assert hits(alice, "absent") == []
    # Bob finds only his own.
    assert {h["conversation_id"] for h in hits(bob, "torque")} == {theirs}


def test_the_index_follows_edits_truncation_and_deletion(backend: Backend) -> None:
    _, people = backend
    alice = people.alice
    conversation = alice.new(title="Gearbox")["id"]
    path = f"/api/conversations/{conversation}"
    say(alice, conversation, "the gearbox whines", "check the bearing")
    assert [h["position"] for h in hits(alice, "bearing")] == [1]

    alice.ok("POST", f"{path}/truncate", {"from_position": 1})
    assert hits(alice, "bearing") == []
    assert [h["position"] for h in hits(alice, "whines")] == [0]

    alice.ok("PATCH", path, {"title": "Spindle"})
    assert [h["position"] for h in hits(alice, "spindle")] == [None]
    assert [h["position"] for h in hits(alice, "gearbox")] == [0]  # the message, not the title

    assert alice.call("DELETE", path).status_code == 204
    assert hits(alice, "whines") == [] and hits(alice, "spindle") == []


def test_postgres_search_is_answered_from_the_gin_indexes(database_url: str) -> None:
    """The query's expression is the index's expression (a drift would scan every message
    of every user): with sequential scans off, the plan uses the GIN index. (Titles are
    found through the user's own conversations, which is cheaper than their index.)"""

    async def plan(url: str) -> str:
        engine = create_engine(url)
        try:
            async with engine.connect() as connection:
                await connection.execute(sa.text("SET enable_seqscan = off"))
                explain = sa.text("EXPLAIN " + search.POSTGRES.text).bindparams(
                    sa.bindparam("user_id", type_=sa.Uuid())
                )
                params = {"user_id": uuid.uuid4(), "q": "torque", "limit": 20}
                return "\n".join(r[0] for r in await connection.execute(explain, params))
        finally:
            await engine.dispose()

    with fresh_postgres(database_url, "enclave_conv") as url:
        migrate.upgrade(url)
        text = asyncio.run(plan(url))
    assert "ix_conversation_messages_search" in text, text


def test_sqlite_search_tables_stay_in_step_with_their_rows(tmp_path: Path) -> None:
    """The FTS5 indexes themselves, read directly: an entry a trigger failed to remove
    would still match here (the API's join to the rows would hide it, while it grew the
    index and skewed bm25)."""
    gateway = embedded_gateway(tmp_path)
    with client_for(gateway) as client:
        alice = people(client, gateway).alice
        kept, dropped = alice.new(title="kept")["id"], alice.new(title="dropped")["id"]
        for conversation in (kept, dropped):
            say(alice, conversation, "spindle bearing noise", "grease it", "still noisy")
        alice.ok("POST", f"/api/conversations/{kept}/truncate", {"from_position": 1})
        alice.ok("PATCH", f"/api/conversations/{kept}", {"title": "renamed"})
        assert alice.call("DELETE", f"/api/conversations/{dropped}").status_code == 204

    path = gateway.settings.effective_database_url.removeprefix("sqlite+aiosqlite:///")
    with sqlite3.connect(path) as db:
        for table in ("conversation_messages_fts", "conversation_titles_fts"):
            db.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        indexed = db.execute(
            "SELECT rowid FROM conversation_messages_fts WHERE conversation_messages_fts "
            "MATCH 'spindle OR grease OR noisy'"
        ).fetchall()
        assert len(indexed) == 1  # kept's first message; nothing of the deleted one
        titles = db.execute("SELECT title FROM conversation_titles_fts").fetchall()
        assert titles == [("renamed",)]
