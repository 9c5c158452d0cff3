"""Retention: delete the oldest records and keep the chain verifiable from a new anchor.

Only a prefix of the chain (in seq order) can go, or verification would find gaps: prune
deletes every record up to the first one that is not older than the cut-off, and moves the
anchor to the last one deleted. Records are written roughly in time order, so what stays
behind a young record is a few seconds' worth at most.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import structlog
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.base import utc_now
from gateway.db.models import RequestRecord
from gateway.domain.audit.entry import to_utc
from gateway.domain.audit.store import lock_chain

log = structlog.get_logger("gateway.audit")
RETENTION_INTERVAL_SECONDS = 3600.0


async def prune(db: AsyncSession, older_than: datetime) -> int:
    """Delete records created before ``older_than``; returns how many. Commit is the caller's."""
    chain = await lock_chain(db)  # writers wait: the anchor and the rows move together
    first_young = await db.scalar(
        select(func.min(RequestRecord.seq)).where(
            RequestRecord.seq > chain.anchor_seq, RequestRecord.created_at >= to_utc(older_than)
        )
    )
    last = chain.head_seq if first_young is None else first_young - 1
    if last <= chain.anchor_seq:
        return 0
    last_hash = await db.scalar(select(RequestRecord.hash).where(RequestRecord.seq == last))
    if last_hash is None:
        raise RuntimeError(f"audit record {last} is missing; run `enclave audit verify`")
    result = await db.execute(delete(RequestRecord).where(RequestRecord.seq <= last))
    chain.anchor_seq, chain.anchor_hash = last, last_hash
    await db.flush()
    return int(getattr(result, "rowcount", 0) or 0)


async def prune_older_than_days(db: async_sessionmaker[AsyncSession], days: int) -> int:
    if days < 1:
        raise ValueError("days must be at least 1")
    async with db.begin() as session:
        return await prune(session, utc_now() - timedelta(days=days))


async def retention_loop(
    db: async_sessionmaker[AsyncSession],
    days: int,
    interval: float = RETENTION_INTERVAL_SECONDS,
) -> None:
    """Prune every ``interval`` seconds, forever (cancel the task to stop it)."""
    while True:
        try:
            deleted = await prune_older_than_days(db, days)
            if deleted:
                log.info("audit records pruned", deleted=deleted, older_than_days=days)
        except Exception:
            log.exception("audit retention failed; will try again")
        await asyncio.sleep(interval)
