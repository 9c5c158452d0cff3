"""What the proxy runs on: the worker pool, the limiter, the audit writer, one HTTP client.

Built in `create_app`, started on startup (the first health check of every worker is
awaited, so the models are known before the first request) and closed on shutdown.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import structlog

from gateway.domain.audit.writer import AuditWriter
from gateway.domain.limits.types import Limiter
from gateway.domain.proxy.http1 import Http1Pool
from gateway.domain.proxy.metrics import GatewayMetrics
from gateway.domain.workers.pool import WorkerPool
from gateway.domain.workers.supervisor import WorkerSupervisor
from gateway.settings import Settings
from gateway.tracing import RequestTracing

log = structlog.get_logger("gateway.workers")


@dataclass(slots=True)
class Traffic:
    settings: Settings
    pool: WorkerPool
    limiter: Limiter
    audit: AuditWriter
    metrics: GatewayMetrics
    tracing: RequestTracing
    worker_token: str
    # The embedded default's own worker, started before the pool's first check.
    supervisor: WorkerSupervisor | None = None
    _starting: asyncio.Task[None] | None = None
    # Our own HTTP/1.1 client for the calls to workers (see http1.py for why).
    http: Http1Pool = field(init=False)

    def __post_init__(self) -> None:
        self.http = Http1Pool(
            connect_timeout=5.0, read_timeout=float(self.settings.upstream_timeout_seconds)
        )

    @classmethod
    def build(
        cls,
        settings: Settings,
        pool: WorkerPool,
        limiter: Limiter,
        audit: AuditWriter,
        tracing: RequestTracing,
        worker_token: str,
        supervisor: WorkerSupervisor | None = None,
    ) -> Traffic:
        return cls(
            settings,
            pool,
            limiter,
            audit,
            GatewayMetrics(),
            tracing,
            worker_token,
            supervisor,
        )

    async def start(self) -> None:
        """Start checking workers. The embedded worker starts in the background: the gateway
        serves sign-in and the console at once, and the API answers 503 until it is ready."""
        if self.supervisor is not None:
            self._starting = asyncio.create_task(self._start_worker(self.supervisor))
        await self.pool.start()

    async def _start_worker(self, supervisor: WorkerSupervisor) -> None:
        try:
            await supervisor.start()
        except Exception as exc:
            log.error("the embedded worker did not start", error=str(exc))
            return
        await self.pool.check_all()  # in at once, not at the next interval

    async def close(self) -> None:
        if self._starting is not None:
            self._starting.cancel()
        await self.pool.close()
        await self.http.close()
        await self.limiter.close()
        if self.supervisor is not None:
            await self.supervisor.close()
