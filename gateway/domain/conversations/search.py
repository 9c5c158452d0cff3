"""Full-text search over one user's messages and titles, best matches first.

Postgres: ``websearch_to_tsquery('simple', q)`` against ``to_tsvector('simple', ...)``
(the expressions the GIN indexes of migration 0004 are built on), ranked by ``ts_rank``,
snippets from ``ts_headline``. SQLite: the FTS5 tables of the same migration, ranked by
``bm25``, snippets from ``snippet()``. The 'simple' configuration and FTS5's unicode61
tokenizer agree: words match whole and case-insensitively, with no stemming and no stop
words, so that any language is searched alike.

The query is user input and only ever a bound parameter. FTS5 would read its own syntax in
it (``"``, ``*``, ``NEAR(``, ``OR``, ``col:``), so on SQLite each word becomes a quoted term
and each "quoted phrase" a quoted phrase; nothing else of FTS5's syntax is reachable.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.conversations.schemas import SearchHit

MAX_QUERY_CHARS = 500
MAX_HITS = 100
DEFAULT_HITS = 20
SNIPPET_WORDS = 16
# Plain text: no highlight markers, so a snippet is never markup (the UI marks the words).
HEADLINE_OPTIONS = (
    f'StartSel="", StopSel="", MaxFragments=1, MaxWords={SNIPPET_WORDS}, '
    f"MinWords={SNIPPET_WORDS // 2}"
)
_TERM = re.compile(r'"([^"]*)"?|(\S+)')
_WORD = re.compile(r"\w")

_TYPES: dict[str, Any] = {
    "conversation_id": sa.Uuid(),
    "title": sa.String(),
    "position": sa.Integer(),
    "snippet": sa.String(),
}

POSTGRES = sa.text(
    f"""
    WITH q AS (SELECT websearch_to_tsquery('simple', :q) AS query),
    hits AS (
        SELECT m.conversation_id, m.position, m.content AS body,
               ts_rank(to_tsvector('simple', m.content), q.query) AS score
        FROM conversation_messages m JOIN conversations c ON c.id = m.conversation_id, q
        WHERE c.user_id = :user_id AND to_tsvector('simple', m.content) @@ q.query
        UNION ALL
        SELECT c.id, NULL, c.title, ts_rank(to_tsvector('simple', c.title), q.query)
        FROM conversations c, q
        WHERE c.user_id = :user_id AND to_tsvector('simple', c.title) @@ q.query
        ORDER BY score DESC, conversation_id, position
        LIMIT :limit
    )
    SELECT h.conversation_id, c.title, h.position,
           ts_headline('simple', h.body, q.query, '{HEADLINE_OPTIONS}') AS snippet
    FROM hits h JOIN conversations c ON c.id = h.conversation_id, q
    ORDER BY h.score DESC, h.conversation_id, h.position
    """
)

SQLITE = sa.text(
    f"""
    SELECT c.id AS conversation_id, c.title AS title, m.position AS position,
           snippet(conversation_messages_fts, 0, '', '', '…', {SNIPPET_WORDS}) AS snippet,
           bm25(conversation_messages_fts) AS score
    FROM conversation_messages_fts
    JOIN conversation_messages m ON m.id = conversation_messages_fts.rowid
    JOIN conversations c ON c.id = m.conversation_id
    WHERE conversation_messages_fts MATCH :q AND c.user_id = :user_id
    UNION ALL
    SELECT c.id, c.title, NULL,
           snippet(conversation_titles_fts, 0, '', '', '…', {SNIPPET_WORDS}),
           bm25(conversation_titles_fts)
    FROM conversation_titles_fts
    JOIN conversations c ON c.id = conversation_titles_fts.conversation_id
    WHERE conversation_titles_fts MATCH :q AND c.user_id = :user_id
    ORDER BY score, conversation_id, position
    LIMIT :limit
    """
)


def check_query(q: str | None) -> str:
    text = (q or "").strip()
    if not text:
        raise ValueError("q: say what to search for")
    if len(text) > MAX_QUERY_CHARS:
        raise ValueError(f"q: at most {MAX_QUERY_CHARS} characters")
    if "\x00" in text:
        raise ValueError("q: must not contain a NUL character")
    return text


def check_limit(limit: int) -> int:
    if not 1 <= limit <= MAX_HITS:
        raise ValueError(f"limit must be between 1 and {MAX_HITS}")
    return limit


def fts5_query(text: str) -> str:
    """Each word a quoted term, each "quoted phrase" a quoted phrase: all must match."""
    parts = [m.group(1) if m.group(1) is not None else m.group(2) for m in _TERM.finditer(text)]
    # A term with no word in it ("*", "") would match nothing and is left out.
    return " ".join('"' + part.replace('"', '""') + '"' for part in parts if _WORD.search(part))


async def search(
    db: AsyncSession, user_id: uuid.UUID, q: str | None, limit: int
) -> list[SearchHit]:
    text, limit = check_query(q), check_limit(limit)
    if db.get_bind().dialect.name == "sqlite":
        statement, query = SQLITE, fts5_query(text)
        if not query:
            return []
    else:
        statement, query = POSTGRES, text
    bound = statement.bindparams(
        sa.bindparam("user_id", type_=sa.Uuid()), q=query, limit=limit
    ).columns(**_TYPES)
    rows = await db.execute(bound, {"user_id": user_id})
    return [SearchHit(r.conversation_id, r.title, r.position, r.snippet) for r in rows]
