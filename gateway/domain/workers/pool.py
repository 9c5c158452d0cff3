"""The workers the gateway forwards to: their health, their models, their load.

The pool checks every worker in the background (see :mod:`.health`) and answers one
question on the request path, without I/O: which healthy worker serving this model should
take this request (see :mod:`.routing`). The proxy holds a :meth:`WorkerPool.lease` for the
whole request, so ``in_flight`` counts streams until their last chunk, and calls
:meth:`WorkerPool.mark_failed` when it cannot connect, so a dead worker stops taking
requests at once instead of at the next check.

Whoever must act when a worker comes (back) up registers with :meth:`WorkerPool.on_healthy`:
the prefix warmer re-pins its assistants there, since a worker that was down may have
restarted with an empty cache. An admin's restart marks the worker down first
(:meth:`WorkerPool.mark_restarting`), so its return is such a transition too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
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
    # Held out of routing after it became healthy, until the prefix warmer has pinned the
    # assistants' prompts on it (or the hold ran out): its first requests find them cached.
    warming: bool = False
    # Being replaced by a weight swap (swap.py): it still takes requests until its
    # successor does, but the warmer pins on the successor, which will take them all.
    retiring: bool = False

    @property
    def routable(self) -> bool:
        return self.healthy and not self.draining and not self.warming

    @property
    def warmable(self) -> bool:
        """Takes requests once warm: what the warmer picks among (the router will too)."""
        return self.healthy and not self.draining and not self.retiring


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
        self._on_healthy: list[Callable[[Upstream], None]] = []
        self._hold_s: float | None = None
        self._holds: dict[str, asyncio.TimerHandle] = {}

    def hold_new_workers(self, seconds: float) -> None:
        """From now on, a worker that becomes healthy is held out of routing (``warming``)
        until :meth:`release` or ``seconds`` later, whichever comes first."""
        if seconds <= 0:
            raise ValueError(f"the hold must be positive, got {seconds}")
        self._hold_s = seconds

    def release(self, upstream: Upstream) -> None:
        """End ``upstream``'s hold: it takes requests (when healthy and not drained)."""
        upstream.warming = False
        handle = self._holds.pop(upstream.url, None)
        if handle is not None:
            handle.cancel()

    def on_healthy(self, callback: Callable[[Upstream], None]) -> None:
        """Call ``callback(upstream)`` whenever a worker passes a check after failing one
        (or at its first check): it must not block; what it raises is logged."""
        self._on_healthy.append(callback)

    def knows(self, model: str) -> bool:
        """Whether any worker has ever listed ``model`` (no I/O, no sorting: the hot path)."""
        return model in self._known_models

    @property
    def upstreams(self) -> list[Upstream]:
        return list(self._upstreams)

    @property
    def client(self) -> httpx.AsyncClient:
        """The client the health checks use (the admin's workers view scrapes with it)."""
        return self._client

    def models(self, *, warming_too: bool = False) -> list[str]:
        """Every model at least one routable worker serves, sorted; ``warming_too``: or one
        held for warming."""
        return sorted(
            {
                m
                for u in self._upstreams
                if (u.warmable if warming_too else u.routable)
                for m in u.models
            }
        )

    def known_models(self) -> list[str]:
        """Every model any worker has ever listed, healthy now or not, sorted."""
        return sorted(self._known_models)

    def forget(self, model: str) -> None:
        """Stop calling ``model`` known (a 503 while it is down) once no worker lists it:
        a weight swap renamed it away, so it is now a model that does not exist (404)."""
        if not any(model in u.models for u in self._upstreams):
            self._known_models.discard(model)

    @property
    def ever_listed(self) -> bool:
        """Whether any worker has listed its models yet (False while all are starting)."""
        return self._ever_listed

    def pick(self, model: str, affinity: str | None, *, warming_too: bool = False) -> Upstream:
        """The worker for one request for ``model``; raises :class:`NoUpstream`.
        ``warming_too``: workers held for warming count (the warmer's pick: the same one
        the router makes once they are released)."""
        candidates = [
            u
            for u in self._upstreams
            if (u.warmable if warming_too else u.routable) and model in u.models
        ]
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

    def add(self, url: str) -> Upstream:
        """A new worker at the end of the pool (a weight swap's new one); not routable until
        a check passes (and its hold, if any, ends)."""
        upstream = Upstream(url.rstrip("/"))
        if any(u.url == upstream.url for u in self._upstreams):
            raise ValueError(f"the pool already has a worker at {upstream.url}")
        self._upstreams = [*self._upstreams, upstream]
        return upstream

    def replace(self, old: Upstream, new: Upstream) -> None:
        """``new`` (added earlier) takes ``old``'s place, and index, in the pool; ``old``
        leaves it (leases on it still finish: they hold the object, not the index)."""
        upstreams = [u for u in self._upstreams if u is not new]
        upstreams[upstreams.index(old)] = new
        self._upstreams = upstreams
        handle = self._holds.pop(old.url, None)
        if handle is not None:
            handle.cancel()

    def remove(self, upstream: Upstream) -> None:
        """Take an added worker out again (a swap that failed)."""
        self._upstreams = [u for u in self._upstreams if u is not upstream]
        handle = self._holds.pop(upstream.url, None)
        if handle is not None:
            handle.cancel()

    def mark_failed(self, upstream: Upstream, error: str) -> None:
        """Take ``upstream`` out until a health check passes again (a passive check)."""
        self._set_unhealthy(upstream, error, "unreachable")

    def mark_restarting(self, upstream: Upstream) -> None:
        """An admin restarts ``upstream``: down until a check passes, which then counts as
        its coming back (the on_healthy callbacks run)."""
        self._set_unhealthy(upstream, "restarting", "loading")

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
        became_healthy = not upstream.healthy
        if became_healthy:
            log.info("worker healthy", worker=upstream.url, models=list(models))
        upstream.healthy = True
        upstream.last_error = ""
        upstream.state = "ready"
        if became_healthy and self._hold_s is not None:
            upstream.warming = True
            loop = asyncio.get_running_loop()
            previous = self._holds.pop(upstream.url, None)
            if previous is not None:
                previous.cancel()
            self._holds[upstream.url] = loop.call_later(self._hold_s, self.release, upstream)
        if became_healthy:
            for callback in self._on_healthy:
                try:
                    callback(upstream)
                except Exception:  # one listener's bug must not stop health checking
                    log.exception("worker healthy callback failed", worker=upstream.url)

    async def check_all(self) -> None:
        await asyncio.gather(*(self.check(u) for u in self._upstreams))

    async def start(self) -> None:
        """Check every worker once (so models are known), then keep checking."""
        if self._loop_task is not None:
            raise RuntimeError("the worker pool is already started")
        await self.check_all()
        self._loop_task = asyncio.create_task(self._check_forever(), name="worker-health")

    async def close(self) -> None:
        for handle in self._holds.values():
            handle.cancel()
        self._holds.clear()
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
