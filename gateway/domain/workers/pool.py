"""The workers the gateway forwards to: their health, their models, their load.

The pool checks every worker in the background (see :mod:`.health`) and answers one
question on the request path, without I/O: which healthy worker serving this model should
take this request (see :mod:`.routing`). The proxy holds a :meth:`WorkerPool.lease` for the
whole request, so ``in_flight`` counts streams until their last chunk, and calls
:meth:`WorkerPool.mark_failed` when it cannot connect, so a dead worker stops taking
requests at once instead of at the next check.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import httpx
import structlog

from gateway.domain.workers import routing
from gateway.domain.workers.health import CHECK_TIMEOUT_S, CheckFailed, UpstreamState, probe

log = structlog.get_logger("gateway.workers")


@dataclass
class Upstream:
    """One worker; plain attributes, so /metrics can read health and load directly."""

    url: str
    healthy: bool = False
    # What the last good check listed; kept while unhealthy, so the model stays known.
    models: tuple[str, ...] = ()
    # Context length per model, as the last good check reported it (absent: not reported).
    max_model_len: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    last_error: str = ""
    state: UpstreamState = "unknown"  # the last check's verdict in a word (health.py)
    # Set by an admin (drain, restart): takes no new requests, whatever its health says;
    # what it runs finishes. Only a restart of a supervised worker clears it.
    draining: bool = False

    @property
    def routable(self) -> bool:
        return self.healthy and not self.draining


class NoUpstream(LookupError):
    """No healthy worker serves ``model``.

    ``known`` is False when no worker has ever listed the model (the proxy answers 404);
    True when some worker did but none can take it now (503).
    """

    def __init__(self, model: str, *, known: bool) -> None:
        self.model = model
        self.known = known
        if known:
            message = f"no healthy worker serves the model {model!r} right now"
        else:
            message = f"the model {model!r} does not exist"
        super().__init__(message)


class WorkerPool:
    def __init__(
        self,
        urls: Sequence[str],
        token: str,
        *,
        interval: float,
        client: httpx.AsyncClient | None = None,
        affinity_slack: int = 4,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the health-check interval must be positive, got {interval}")
        if affinity_slack < 0:
            raise ValueError(f"affinity_slack must not be negative, got {affinity_slack}")
        self._upstreams = [Upstream(url.rstrip("/")) for url in dict.fromkeys(urls)]
        self._token = token
        self.interval = interval
        self.affinity_slack = affinity_slack
        self._client = client or httpx.AsyncClient(timeout=CHECK_TIMEOUT_S)
        self._owns_client = client is None
        self._turns = itertools.count()
        # Every model any worker has ever listed: tells "unknown model" from "all down".
        self._known_models: set[str] = set()
        self._ever_listed = False
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def upstreams(self) -> list[Upstream]:
        return list(self._upstreams)

    @property
    def client(self) -> httpx.AsyncClient:
        """The client the health checks use (the admin's workers view scrapes with it)."""
        return self._client

    def models(self) -> list[str]:
        """Every model at least one healthy, undrained worker serves, sorted."""
        return sorted({m for u in self._upstreams if u.routable for m in u.models})

    def known_models(self) -> list[str]:
        """Every model any worker has ever listed, healthy now or not, sorted."""
        return sorted(self._known_models)

    @property
    def ever_listed(self) -> bool:
        """Whether any worker has listed its models yet (False while all are starting)."""
        return self._ever_listed

    def pick(self, model: str, affinity: str | None) -> Upstream:
        """The worker for one request for ``model``; raises :class:`NoUpstream`."""
        candidates = [u for u in self._upstreams if u.routable and model in u.models]
        if not candidates:
            # Before any worker has ever answered, nothing can be called unknown: that
            # is an outage (503), not a typo in the model name (404).
            known = model in self._known_models or not self._ever_listed
            raise NoUpstream(model, known=known)
        turn = next(self._turns) if affinity is None else 0
        return routing.choose(candidates, affinity, slack=self.affinity_slack, turn=turn)

    @contextlib.contextmanager
    def lease(self, upstream: Upstream) -> Iterator[None]:
        upstream.in_flight += 1
        try:
            yield
        finally:
            upstream.in_flight -= 1

    def mark_failed(self, upstream: Upstream, error: str) -> None:
        """Take ``upstream`` out until a health check passes again (a passive check)."""
        self._set_unhealthy(upstream, error, "unreachable")

    async def check(self, upstream: Upstream) -> None:
        try:
            listing = await probe(self._client, upstream.url, self._token)
        except CheckFailed as exc:
            self._set_unhealthy(upstream, str(exc), exc.state)
            return
        models = listing.models
        upstream.models = models
        upstream.max_model_len = listing.max_model_len
        self._known_models.update(models)
        self._ever_listed = True
        if not upstream.healthy:
            log.info("worker healthy", worker=upstream.url, models=list(models))
        upstream.healthy = True
        upstream.last_error = ""
        upstream.state = "ready"

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(u) for u in self._upstreams))

    async def start(self) -> None:
        """Check every worker once (so models are known), then keep checking."""
        if self._loop_task is not None:
            raise RuntimeError("the worker pool is already started")
        await self.check_all()
        self._loop_task = asyncio.create_task(self._check_forever(), name="worker-health")

    async def close(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        if self._owns_client:
            await self._client.aclose()

    async def _check_forever(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.check_all()
            except Exception:  # a bug here must not stop health checking for good
                log.exception("worker health check crashed")

    def _set_unhealthy(self, upstream: Upstream, error: str, state: UpstreamState) -> None:
        # Logged once per transition: a worker down for an hour is one line, not 1,800.
        if upstream.healthy or not upstream.last_error:
            log.warning("worker unhealthy", worker=upstream.url, error=error)
        upstream.healthy = False
        upstream.last_error = error
        upstream.state = state
