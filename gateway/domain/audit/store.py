"""Appending entries to the chain: one transaction per batch, under the chain row's lock.

``SELECT ... FOR UPDATE`` on the chain row makes every writer, in this process or another
one on the same Postgres, take its turn: each batch reads the head, numbers its records
head+1.., inserts them and moves the head before the next batch may read it. SQLite has no
row locks; its one writer at a time gives the same order, and a writer that read a stale
head fails on the seq primary key and retries rather than forking the chain.

The same transaction adds the batch's API requests to the usage rollups
(``usage.rollup``): they commit, or fail, together with the records they count.

Once a batch has committed its new head goes to the head log too (see ``head_log``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import structlog
from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models import AuditChain, RequestRecord
from gateway.domain.audit.chain import CHAIN_ROW_ID, record_values
from gateway.domain.audit.entry import AuditEntry, to_utc
from gateway.domain.audit.head_log import HeadLog
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.usage.rollup import add_to_rollups

log = structlog.get_logger("gateway.audit")
HEAD_LOG_TIMEOUT_SECONDS = 2.0


async def lock_chain(session: AsyncSession) -> AuditChain:
    statement = select(AuditChain).where(AuditChain.id == CHAIN_ROW_ID).with_for_update()
    chain = (await session.scalars(statement)).one_or_none()
    if chain is None:
        raise RuntimeError("the audit_chain row is missing: run `enclave migrate`")
    return chain


async def append(
    db: async_sessionmaker[AsyncSession],
    entries: Sequence[AuditEntry],
    seal: ChainSeal,
    *,
    skip_recorded: bool,
) -> int:
    """Chain and insert ``entries`` in order, in one transaction; returns how many went in.

    ``skip_recorded`` (for spool replay) leaves out entries already in the table, matched by
    request id (always the gateway's own) and time: a crash after a replay committed but
    before its spool file was removed must not write them twice.
    """
    async with db.begin() as session:
        chain = await lock_chain(session)
        if skip_recorded:
            entries = await _not_recorded(session, [entry.fitted() for entry in entries])
        head = await append_locked(session, chain, entries, seal.key)
    if head is None:
        return 0
    await record_head(seal.head_log, *head)
    return len(entries)


async def append_locked(
    session: AsyncSession, chain: AuditChain, entries: Sequence[AuditEntry], key: bytes
) -> tuple[int, str] | None:
    """Insert ``entries`` after the head of ``chain`` (locked by the caller, in its
    transaction), add them to the usage rollups and move the head; returns the new head, or
    None when there was nothing. The caller records the head with :func:`record_head` once
    the transaction committed."""
    seq, prev_hash = chain.head_seq, chain.head_hash
    rows = []
    for entry in entries:
        seq += 1
        row = record_values(key, seq, prev_hash, entry.fitted())
        rows.append(row)
        prev_hash = row["hash"]
    if not rows:
        return None
    # render_nulls: otherwise the ORM splits the executemany wherever the NULL
    # columns differ from one row to the next (most rows here): 3x slower.
    statement = insert(RequestRecord).execution_options(render_nulls=True)
    await session.execute(statement, rows)
    await add_to_rollups(session, entries)
    chain.head_seq, chain.head_hash = seq, prev_hash
    return seq, prev_hash


async def record_head(head_log: HeadLog, seq: int, head_hash: str) -> None:
    """Append a committed head to the head log. A failure here loses no record (they are
    committed), only this copy of the head, so it is logged rather than raised; and a hung
    mount must not hold up the writer (its batch would count as failed and be spooled)."""
    try:
        await asyncio.wait_for(
            asyncio.to_thread(head_log.record, seq, head_hash), HEAD_LOG_TIMEOUT_SECONDS
        )
    except (OSError, TimeoutError) as exc:
        log.error("audit head not recorded", path=str(head_log.path), seq=seq, error=repr(exc))


async def _not_recorded(session: AsyncSession, entries: list[AuditEntry]) -> list[AuditEntry]:
    ids = {entry.request_id for entry in entries}
    statement = select(RequestRecord.request_id, RequestRecord.created_at).where(
        RequestRecord.request_id.in_(ids)
    )
    seen = {(rid, to_utc(at)) for rid, at in (await session.execute(statement)).all()}
    fresh = []
    for entry in entries:
        key = (entry.request_id, entry.created_at)
        if key not in seen:
            seen.add(key)
            fresh.append(entry)
    return fresh
