"""Retention: delete the oldest records and keep the chain verifiable from a new anchor.

Only a prefix of the chain (in seq order) can go, or verification would find gaps: prune
deletes every record up to the first one that is not older than the cut-off, and moves the
anchor to the last one deleted. Records are written roughly in time order, so what stays
behind a young record is a few seconds' worth at most.

Each prune that deletes anything appends an ``audit.prune`` record in the same transaction,
naming the new anchor: verification accepts an anchor only when the latest such record
(keyed, so only the gateway can write it) names it, so deleting old records by hand and
moving the anchor is caught like any other removal.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import structlog
from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.base import utc_now
from gateway.db.models import RequestRecord
from gateway.domain.audit.actions import SYSTEM, Actor, action_entry
from gateway.domain.audit.entry import to_utc
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.store import append_locked, lock_chain, record_head

log = structlog.get_logger("gateway.audit")
RETENTION_INTERVAL_SECONDS = 3600.0
PRUNE_ACTION = "audit.prune"


async def prune(
    db: AsyncSession, older_than: datetime, key: bytes, actor: Actor = SYSTEM
) -> tuple[int, tuple[int, str] | None]:
    """Delete records created before ``older_than`` and log it. Returns how many went and
    the chain's new head (for the head log, once the caller has committed)."""
    chain = await lock_chain(db)  # writers wait: the anchor and the rows move together
    first_young = await db.scalar(
        select(func.min(RequestRecord.seq)).where(
            RequestRecord.seq > chain.anchor_seq, RequestRecord.created_at >= to_utc(older_than)
        )
    )
    last = chain.head_seq if first_young is None else first_young - 1
    if last <= chain.anchor_seq:
        return 0, None
    last_hash = await db.scalar(select(RequestRecord.hash).where(RequestRecord.seq == last))
    if last_hash is None:
        raise RuntimeError(f"audit record {last} is missing; run `enclave audit verify`")
    result = await db.execute(delete(RequestRecord).where(RequestRecord.seq <= last))
    deleted = int(getattr(result, "rowcount", 0) or 0)
    before = {"anchor_seq": chain.anchor_seq, "anchor_hash": chain.anchor_hash}
    chain.anchor_seq, chain.anchor_hash = last, last_hash
    after = {"anchor_seq": last, "anchor_hash": last_hash}
    extra = {"deleted": deleted, "older_than": to_utc(older_than).isoformat()}
    record = action_entry(actor, PRUNE_ACTION, "audit_chain", "1", before, after, extra=extra)
    head = await append_locked(db, chain, [record], key)
    await db.flush()
    return deleted, head


async def prune_older_than_days(
    db: async_sessionmaker[AsyncSession], days: int, seal: ChainSeal, actor: Actor = SYSTEM
) -> int:
    if days < 1:
        raise ValueError("days must be at least 1")
    async with db.begin() as session:
        deleted, head = await prune(session, utc_now() - timedelta(days=days), seal.key, actor)
    if head is not None:
        await record_head(seal.head_log, *head)
    return deleted


async def retention_loop(
    db: async_sessionmaker[AsyncSession],
    days: int,
    seal: ChainSeal,
    interval: float = RETENTION_INTERVAL_SECONDS,
) -> None:
    """Prune every ``interval`` seconds, forever (cancel the task to stop it)."""
    while True:
        try:
            deleted = await prune_older_than_days(db, days, seal)
            if deleted:
                log.info("audit records pruned", deleted=deleted, older_than_days=days)
        except Exception:
            log.exception("audit retention failed; will try again")
        await asyncio.sleep(interval)
