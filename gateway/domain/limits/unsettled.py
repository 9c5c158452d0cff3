"""Settlements that could not reach Redis, kept and retried until Redis takes them.

A settlement replaces a request's reserved tokens with those it used and frees its
concurrency slot. When Redis is unreachable at that moment, dropping the settlement would
leave the reservation counted in the day's and month's quotas for good (the slot's lease
frees the slot, nothing frees the tokens). So the settlement waits here, in arrival
order, and a background task retries the oldest every ``interval`` until Redis answers.
Retrying is safe: the settle script marks each reservation settled, and a second run of
one already settled changes nothing.

What is lost: the queue is in memory, so settlements pending when the process dies stay
unsettled (the counters keep the reservation: over-counting, the safe side). The queue is
bounded; past ``max_pending`` the oldest is dropped, with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger("gateway.limits")

MAX_PENDING = 100_000


@dataclass(frozen=True, slots=True)
class Settlement:
    """One run of the settle script: its keys and arguments, ready to send again."""

    reservation_id: str
    keys: tuple[str, ...]
    args: tuple[int | str, ...]


Run = Callable[[Settlement], Awaitable[None]]


class UnsettledQueue:
    def __init__(
        self,
        run: Run,
        unreachable: tuple[type[BaseException], ...],
        *,
        interval: float = 0.5,
        max_pending: int = MAX_PENDING,
    ) -> None:
        if interval <= 0 or max_pending < 1:
            raise ValueError("interval must be positive and max_pending at least 1")
        self._run = run
        self._unreachable = unreachable
        self.interval = interval
        self.max_pending = max_pending
        self._pending: deque[Settlement] = deque()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, settlement: Settlement) -> None:
        """Keep ``settlement`` for a retry; starts the retrying task if it is not running."""
        if len(self._pending) >= self.max_pending:
            dropped = self._pending.popleft()
            log.error("limits_settlement_dropped", reservation=dropped.reservation_id)
        self._pending.append(settlement)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._retry_forever(), name="limits-unsettled")

    async def drain(self) -> bool:
        """Send every pending settlement, oldest first; False at the first that fails."""
        while self._pending:
            try:
                await self._run(self._pending[0])
            except self._unreachable:
                return False
            except Exception as exc:  # a refused script would refuse forever: drop it
                settlement = self._pending.popleft()
                log.error(
                    "limits_settlement_refused",
                    reservation=settlement.reservation_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                continue
            self._pending.popleft()
        return True

    async def close(self) -> None:
        """Stop retrying after one last try; what is still pending is logged."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._pending and not await self.drain():
            log.error("limits_unsettled_at_shutdown", count=len(self._pending))

    async def _retry_forever(self) -> None:
        while self._pending:
            await asyncio.sleep(self.interval)
            if await self.drain():
                log.info("limits_settlements_caught_up")
