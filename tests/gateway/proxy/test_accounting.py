"""Ending a request: exactly one settlement attempt, metric and audit entry, whatever happens.

The limiter, metrics and audit writer are real (the in-process limiter, an unstarted writer
whose queue is the thing counted); only the limiter's settle is made to fail or hang.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway.db.engine import create_engine, session_factory
from gateway.domain.audit.writer import AuditWriter
from gateway.domain.identity.principal import Principal
from gateway.domain.limits.memory import InProcessLimiter
from gateway.domain.limits.types import Limits, Reservation, Scope
from gateway.domain.proxy.accounting import Accounting
from gateway.domain.proxy.exchange import Ending, Exchange
from gateway.domain.proxy.metrics import GatewayMetrics
from gateway.domain.proxy.sse import Usage
from tests.gateway.audit.support import seal_for


class BrokenSettle(InProcessLimiter):
    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        raise ConnectionError("the limiter's store went away")


class HangingSettle(InProcessLimiter):
    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        await asyncio.Event().wait()


def _writer(tmp_path: Path) -> AuditWriter:
    db = session_factory(create_engine(f"sqlite+aiosqlite:///{tmp_path / 'audit.db'}"))
    return AuditWriter(db, tmp_path / "spool", seal_for(tmp_path))


def _count(metrics: GatewayMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(f"enclave_gateway_{name}_total", labels) or 0.0


async def _admitted(limiter: InProcessLimiter) -> Exchange:
    exchange = Exchange(Principal(), "chat.completions", "req-1", "127.0.0.1", "test")
    scope = Scope("dept:test", Limits(concurrent_requests=1), "department test")
    exchange.reservation = await limiter.admit([scope], 10)
    return exchange


@pytest.mark.parametrize("limiter_class", [InProcessLimiter, BrokenSettle])
def test_finish_counts_and_audits_once_even_when_settling_fails(
    tmp_path: Path, limiter_class: type[InProcessLimiter]
) -> None:
    async def run() -> None:
        limiter, metrics, writer = limiter_class(), GatewayMetrics(), _writer(tmp_path)
        accounting = Accounting(limiter, metrics, writer)
        exchange = await _admitted(limiter)
        await accounting.finish(exchange, Ending(200, Usage(3, 2, 0)))
        await accounting.finish(exchange, Ending(500, reason="gateway_error"))  # ignored
        assert exchange.finished and writer.pending == 1
        assert _count(metrics, "requests", endpoint="chat.completions", status="200") == 1
        assert _count(metrics, "requests", endpoint="chat.completions", status="500") == 0
        assert _count(metrics, "tokens", department="none", kind="completion") == 2
        broken = limiter_class is BrokenSettle
        assert _count(metrics, "settle_failures") == (1 if broken else 0)

    asyncio.run(run())


def test_finish_cancelled_mid_settlement_still_counts_and_audits(tmp_path: Path) -> None:
    async def run() -> None:
        limiter, metrics, writer = HangingSettle(), GatewayMetrics(), _writer(tmp_path)
        exchange = await _admitted(limiter)
        task = asyncio.create_task(
            Accounting(limiter, metrics, writer).finish(exchange, Ending(499))
        )
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert writer.pending == 1
        assert _count(metrics, "requests", endpoint="chat.completions", status="499") == 1

    asyncio.run(run())
