"""`POST /api/admin/audit/verify`: `enclave audit verify` from the console.

The walk (verify.py) reads the whole chain a page at a time, which takes a while on a long
log, so it runs:

- in a task of its own, shielded from the request: an admin who closes the tab does not
  cancel a half-done check, and admins who ask while one runs wait for that same run
  instead of starting another (one walk per process at a time);
- in a session of its own, not the request's transaction, and read-only. On Postgres that
  is one REPEATABLE READ READ ONLY transaction: a snapshot, so a prune or a batch committed
  meanwhile cannot make a sound chain look broken, and plain reads under MVCC take no lock
  the audit writer waits for (the writer locks only the audit_chain row, FOR UPDATE,
  which a plain read does not touch). The one cost of a long snapshot is that vacuum keeps
  the row versions it may still see until it ends. On SQLite the driver does not open a
  transaction for reads, so each page's read holds the shared lock only while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime

import msgspec
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.verify import VerifyResult, verify_chain

SNAPSHOT = {"isolation_level": "REPEATABLE READ", "postgresql_readonly": True}


class RecordedHeadRead(msgspec.Struct, frozen=True):
    """The highest head in the head log outside the database."""

    seq: int
    hash: str
    at: str


class VerifyRead(msgspec.Struct, frozen=True):
    """The verdict on the chain, as `enclave audit verify` gives it.

    ``bad_seq`` and ``reason`` say where and why a broken chain breaks. ``head_log_matches``
    is None when there is nothing to compare: no head log line yet, a chain pruned past the
    recorded head, or a check that stopped before it reached that seq."""

    ok: bool
    checked: int
    bad_seq: int | None
    reason: str
    head_seq: int
    head_hash: str
    anchor_seq: int
    # Records before keyed_from_seq were hashed with plain SHA-256 (anyone can recompute it).
    unkeyed: int
    keyed_from_seq: int
    recorded_head: RecordedHeadRead | None
    head_log_matches: bool | None
    started_at: datetime
    duration_ms: int


def to_read(result: VerifyResult, started_at: datetime, duration_ms: int) -> VerifyRead:
    recorded = result.recorded
    matches: bool | None = None
    if recorded is not None and recorded.seq >= result.anchor_seq and recorded.seq > 0:
        if result.ok:
            matches = True
        elif result.bad_seq is not None and (
            recorded.seq > result.head_seq or result.bad_seq == recorded.seq
        ):
            matches = False  # a tail cut off, or the recorded record's hash differs
    return VerifyRead(
        ok=result.ok,
        checked=result.checked,
        bad_seq=result.bad_seq,
        reason=result.reason,
        head_seq=result.head_seq,
        head_hash=result.head_hash,
        anchor_seq=result.anchor_seq,
        unkeyed=result.unkeyed,
        keyed_from_seq=result.keyed_from_seq,
        recorded_head=(
            RecordedHeadRead(recorded.seq, recorded.hash, recorded.at) if recorded else None
        ),
        head_log_matches=matches,
        started_at=started_at,
        duration_ms=duration_ms,
    )


class ChainVerification:
    """One walk of the chain at a time in this process; callers meanwhile share it."""

    def __init__(self, db: async_sessionmaker[AsyncSession], seal: ChainSeal) -> None:
        self._db = db
        self._seal = seal
        self._running: asyncio.Task[VerifyRead] | None = None

    async def run(self) -> VerifyRead:
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._walk(), name="audit-verify")
        return await asyncio.shield(self._running)

    async def close(self) -> None:
        if self._running is not None and not self._running.done():
            self._running.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._running

    async def _walk(self) -> VerifyRead:
        started_at, clock = datetime.now(UTC), time.monotonic()
        async with self._db() as session:
            if session.get_bind().dialect.name == "postgresql":
                await session.connection(execution_options=SNAPSHOT)
            try:
                result = await verify_chain(session, self._seal)
            finally:
                await session.rollback()  # it only read
        return to_read(result, started_at, round((time.monotonic() - clock) * 1000))
