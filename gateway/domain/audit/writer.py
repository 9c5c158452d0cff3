"""The audit writer: takes entries from the request path, chains them into the database.

``submit`` only appends to an in-memory queue. A background task takes up to
``batch_size`` entries at a time (waiting ``flush_interval`` for a batch to gather) and
appends them to the chain in one transaction. When the database cannot be reached the
batch goes to the spool instead, and so does every later batch, so that order is kept,
until a replay (tried every ``retry_interval``) has brought the whole spool in.

What is lost in a hard crash (kill -9, power) is only what was still in memory: at most
one flush interval's worth plus the batch being written. Everything spooled survives.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from pathlib import Path

import structlog
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.domain.audit import store
from gateway.domain.audit.entry import AuditEntry
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.spool import Spool

log = structlog.get_logger("gateway.audit")


class AuditWriter:
    def __init__(
        self,
        db: async_sessionmaker[AsyncSession],
        spool_dir: Path,
        seal: ChainSeal,
        *,
        batch_size: int = 256,
        flush_interval: float = 0.05,
        retry_interval: float = 1.0,
        write_timeout: float = 10.0,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if min(flush_interval, retry_interval, write_timeout) < 0:
            raise ValueError("intervals must not be negative")
        self._db = db
        self._seal = seal
        self._spool = Spool(spool_dir)
        self.batch_size = batch_size
        self.flush_interval = flush_interval
        self.retry_interval = retry_interval
        # A write that takes longer counts as a failure: its batch goes to the spool (a
        # commit that did land is then skipped by the replay, see store.append).
        self.write_timeout = write_timeout
        self._queue: deque[AuditEntry] = deque()
        self._in_flight = 0
        self._submitted = 0
        self._done = 0  # written or spooled
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._wake = asyncio.Event()
        self._flushing = 0
        self._closing = False
        self._retry_at = 0.0  # monotonic time before which the database is not tried
        self._task: asyncio.Task[None] | None = None

    @property
    def pending(self) -> int:
        """Entries submitted and neither written nor spooled yet."""
        return len(self._queue) + self._in_flight

    @property
    def seal(self) -> ChainSeal:
        return self._seal

    @property
    def spooled(self) -> int:
        return self._spool.count

    async def start(self) -> None:
        """Start the background task; it first replays any spool left from before."""
        if self._task is not None:
            return
        await asyncio.to_thread(self._spool.adopt)
        if self._spool.count:
            log.warning("audit spool found, replaying", records=self._spool.count)
        self._closing = False
        self._task = asyncio.create_task(self._run(), name="audit-writer")

    def submit(self, entry: AuditEntry) -> None:
        """Queue ``entry``; never blocks and never raises (the request has been served)."""
        try:
            self._queue.append(entry)
            self._submitted += 1
            self._wake.set()
        except Exception:  # pragma: no cover - a deque append does not fail in practice
            log.exception("audit entry not queued", request_id=getattr(entry, "request_id", ""))

    async def flush(self) -> None:
        """Return once everything submitted so far is in the database or in the spool."""
        if self._task is None:
            raise RuntimeError("the audit writer is not started")
        target = self._submitted
        if self._done >= target:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append((target, waiter))
        self._flushing += 1
        self._wake.set()
        try:
            await waiter
        finally:
            self._flushing -= 1

    async def close(self, timeout: float = 30.0) -> None:
        """Flush and stop. What the database does not take stays in the spool."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self.flush(), timeout)
        except TimeoutError:
            log.error("audit entries still in memory at shutdown", count=self.pending)
        self._closing = True
        self._wake.set()
        # On a timeout wait_for cancels the task; the spool is consistent after any write.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._task, timeout)
        self._task = None
        await asyncio.to_thread(self._spool.close)

    async def _run(self) -> None:
        while not (self._closing and not self._queue):
            try:
                await self._next()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("audit writer step failed; retrying")
                await asyncio.sleep(self.retry_interval)

    async def _next(self) -> None:
        replay_due = self._spool.count > 0 and not self._database_down()
        if not self._queue and not replay_due:
            timeout = self.retry_interval if self._spool.count else None
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            self._wake.clear()
        if 0 < len(self._queue) < self.batch_size and not (self._flushing or self._closing):
            await asyncio.sleep(self.flush_interval)  # let a batch gather
        if self._spool.count and not self._database_down():
            await self._replay()
        await self._write_batch()

    async def _write_batch(self) -> None:
        batch = [self._queue.popleft() for _ in range(min(self.batch_size, len(self._queue)))]
        if not batch:
            return
        self._in_flight = len(batch)
        try:
            if not await self._to_database(batch):
                await asyncio.to_thread(self._spool.append, batch)
        except BaseException:
            # Neither written nor spooled (the disk too?): back to the front, in order.
            self._queue.extendleft(reversed(batch))
            raise
        finally:
            self._in_flight = 0
        self._done += len(batch)
        self._wake_flushers()

    async def _to_database(self, batch: list[AuditEntry]) -> bool:
        if self._spool.count or self._database_down():
            return False  # behind the spool, to keep the order
        try:
            await asyncio.wait_for(
                store.append(self._db, batch, self._seal, skip_recorded=False), self.write_timeout
            )
        except Exception as exc:
            self._mark_down(exc)
            return False
        return True

    async def _replay(self) -> None:
        """Bring the spool into the database, oldest file first, a batch per transaction."""
        total = 0
        try:
            for path in await asyncio.to_thread(self._spool.files):
                entries = await asyncio.to_thread(self._spool.read, path)
                for start in range(0, len(entries), self.batch_size):
                    chunk = entries[start : start + self.batch_size]
                    task = store.append(self._db, chunk, self._seal, skip_recorded=True)
                    total += await asyncio.wait_for(task, self.write_timeout)
                await asyncio.to_thread(self._spool.remove, path)
        except Exception as exc:
            self._mark_down(exc)
            return
        finally:
            if total:
                log.info("audit spool replayed", records=total, left=self._spool.count)
        self._retry_at = 0.0

    def _database_down(self) -> bool:
        return time.monotonic() < self._retry_at

    def _mark_down(self, exc: Exception) -> None:
        if not self._retry_at:
            log.error("audit write failed; spooling until the database takes it", error=repr(exc))
        self._retry_at = time.monotonic() + self.retry_interval

    def _wake_flushers(self) -> None:
        still = []
        for target, waiter in self._waiters:
            if self._done >= target:
                if not waiter.done():
                    waiter.set_result(None)
            else:
                still.append((target, waiter))
        self._waiters = still
