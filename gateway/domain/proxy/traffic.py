"""What the proxy runs on: the worker pool, the limiter, the metrics, one HTTP client.

Who owns what: `Traffic` (``app.state.traffic``) holds the proxy's own parts, built for it
and closed with it: the pool, the limiter, the metrics, tracing, the HTTP client for
workers, the workers' token, the embedded worker, and the one setting the proxy reads on
every request (the request body cap), as a plain value. `GatewayState`
(``app.state.gateway``, gateway/state.py) holds what the whole gateway shares: the settings,
the database, Redis, sessions, the key cache and the audit writer, which admin actions and
sign-ins write to as well as the proxy. Nothing is held by both: the proxy's handlers take
the audit writer (and the audit body cap) from `GatewayState`, the rest from here, and hand
them to `Accounting` explicitly.

Built in `create_app`, started on startup (the first health check of every worker is
awaited, so the models are known before the first request) and closed on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

import structlog

from gateway.domain.limits.types import Limiter
from gateway.domain.proxy.http1 import Http1Pool
from gateway.domain.proxy.metrics import GatewayMetrics
from gateway.domain.workers.load import LoadScraper
from gateway.domain.workers.pool import WorkerPool
from gateway.domain.workers.supervisor import WorkerSupervisor
from gateway.settings import Settings
from gateway.tracing import RequestTracing

log = structlog.get_logger("gateway.workers")


@dataclass(slots=True)
class Traffic:
    pool: WorkerPool
    limiter: Limiter
    metrics: GatewayMetrics
    tracing: RequestTracing
    # Our own HTTP/1.1 client for the calls to workers (see http1.py for why).
    http: Http1Pool
    worker_token: str
    body_max_bytes: int  # ENCLAVE_API_BODY_MAX_BYTES: larger request bodies are a 413
    # The embedded default's own worker, started before the pool's first check.
    supervisor: WorkerSupervisor | None = None
    # The admin's workers view: each worker's /metrics, and the last scrapes for rates.
    loads: LoadScraper = field(default_factory=LoadScraper)
    # An admin's restart of the supervised worker, while it runs (workers/admin.py).
    restarting: asyncio.Task[None] | None = None
    # An admin's weight swap of the supervised worker, while it runs (workers/swap.py).
    swapping: asyncio.Task[None] | None = None
    swap_error: str = ""  # why the last weight swap failed ("" when it did not)
    _starting: asyncio.Task[None] | None = None

    def swap_in_progress(self) -> bool:
        return self.swapping is not None and not self.swapping.done()

    def busy(self) -> str:
        """What the supervised worker is going through now ("" when nothing)."""
        for what, task in (("restarting", self.restarting), ("reloading", self.swapping)):
            if task is not None and not task.done():
                return what
        return ""

    @classmethod
    def build(
        cls,
        settings: Settings,
        pool: WorkerPool,
        limiter: Limiter,
        tracing: RequestTracing,
        worker_token: str,
        supervisor: WorkerSupervisor | None = None,
    ) -> Traffic:
        http = Http1Pool(connect_timeout=5.0, read_timeout=float(settings.upstream_timeout_seconds))
        return cls(
            pool,
            limiter,
            GatewayMetrics(),
            tracing,
            http,
            worker_token,
            settings.api_body_max_bytes,
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
        for task in (self.restarting, self.swapping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.pool.close()
        await self.http.close()
        await self.limiter.close()
        if self.supervisor is not None:
            await self.supervisor.close()
