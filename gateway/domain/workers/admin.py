"""`/api/admin/workers`: the pool's workers with their own load, and, for the worker the
gateway supervises (the embedded default), drain and restart.

A worker is named by its index in the pool, never by a URL from the client: the gateway
only ever calls the URLs of its own configuration. Drain takes the worker out of routing
(what it runs finishes) until a restart; restart drains it too, SIGTERMs it (the worker
finishes its streams, up to ``DRAIN_TIMEOUT_S``), starts a new one and puts it back once
it is ready. A restart runs in the background: the answer (202) comes at once and the view
shows ``restarting`` until it is over. Both are audit records (``worker.drain``,
``worker.restart``). Reload is a weight swap (swap.py), in the background too
(``worker.reload``). A worker the gateway does not run answers 409: its owner restarts it.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import ClientException
from litestar.params import FromPath, JSONBody

from gateway.domain.audit.actions import action_entry
from gateway.domain.audit.events import actor_of
from gateway.domain.identity.guards import require_admin
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.workers.admin_schemas import (
    WorkerLoad,
    WorkerRead,
    WorkerReload,
    WorkersRead,
)
from gateway.domain.workers.load import Scrape
from gateway.domain.workers.pool import Upstream
from gateway.domain.workers.swap import Swap, run_swap
from gateway.errors import NotFoundError
from gateway.state import GatewayState

log = structlog.get_logger("gateway.workers")
DRAIN_TIMEOUT_S = 30.0


def _traffic(request: Request[Any, Any, Any]) -> Traffic:
    traffic: Traffic = request.app.state.traffic
    return traffic


def _supervised(traffic: Traffic, upstream: Upstream) -> bool:
    supervisor = traffic.supervisor
    return supervisor is not None and supervisor.url == upstream.url


def _load(scrape: Scrape, at: datetime) -> WorkerLoad | None:
    sample = scrape.sample
    if sample is None:
        return None

    def count(value: float | None) -> int | None:
        return None if value is None else round(value)

    return WorkerLoad(
        requests_waiting=count(sample.requests_waiting),
        requests_running=count(sample.requests_running),
        kv_cache_usage=sample.kv_cache_usage,
        generation_tokens_per_s=scrape.tokens_per_s,
        prefix_cache_hit_rate=sample.prefix_cache_hit_rate,
        scraped_at=at,
    )


def _read(traffic: Traffic, index: int, upstream: Upstream, scrape: Scrape | None) -> WorkerRead:
    supervised = _supervised(traffic, upstream)
    busy = traffic.busy()
    at = datetime.now(UTC)
    return WorkerRead(
        index=index,
        url=upstream.url,
        healthy=upstream.healthy,
        state=upstream.state,
        draining=upstream.draining,
        supervised=supervised,
        restarting=supervised and busy == "restarting",
        reloading=supervised and busy == "reloading",
        reload_error=traffic.swap_error if supervised else "",
        models=list(upstream.models),
        max_model_len=dict(upstream.max_model_len),
        in_flight=upstream.in_flight,
        last_error=upstream.last_error,
        crash_restarts=traffic.supervisor.restarts if supervised and traffic.supervisor else None,
        load=_load(scrape, at) if scrape else None,
        load_error=scrape.error if scrape else "",
    )


def _supervised_upstream(traffic: Traffic, index: int) -> Upstream:
    upstreams = traffic.pool.upstreams
    if not 0 <= index < len(upstreams):
        raise NotFoundError("no such worker")
    upstream = upstreams[index]
    if not _supervised(traffic, upstream):
        raise ClientException(
            status_code=409,
            detail="the gateway does not run this worker (it was configured by URL): "
            "drain or restart it where it runs",
        )
    return upstream


async def _restart(traffic: Traffic, upstream: Upstream) -> None:
    supervisor = traffic.supervisor
    assert supervisor is not None  # _supervised_upstream checked it
    upstream.draining = True
    traffic.pool.mark_restarting(upstream)  # its return re-runs the on_healthy callbacks
    try:
        await supervisor.restart(DRAIN_TIMEOUT_S)
    except Exception:
        log.exception("worker restart failed", worker=upstream.url)
    finally:
        upstream.draining = False
        await traffic.pool.check(upstream)  # back in at once, not at the next interval


def _check_idle(traffic: Traffic, what: str) -> None:
    busy = traffic.busy()
    if busy:
        raise ClientException(status_code=409, detail=f"this worker is already {busy}")
    if traffic.supervisor is not None and traffic.supervisor.starting:
        raise ClientException(
            status_code=409,
            detail=f"the embedded worker is still starting: {what} it once it is ready",
        )
    if traffic.supervisor is None or not traffic.supervisor.running:
        raise ClientException(
            status_code=409,
            detail="the embedded worker is not running (its start failed or the gateway "
            "is stopping): the gateway's log says why",
        )


class WorkerAdminController(Controller):
    path = "/api/admin/workers"
    guards = [require_admin]  # noqa: RUF012

    @get("/")
    async def list_workers(self, request: Request) -> WorkersRead:
        """Every worker in the pool, in pool order, with its /metrics scraped now."""
        traffic = _traffic(request)
        urls = [u.url for u in traffic.pool.upstreams]
        scrapes = await traffic.loads.scrape_all(traffic.pool.client, urls)
        scraped = dict(zip(urls, scrapes, strict=True))
        # The pool and its supervisor are read again after the scrapes, with no await
        # between: a weight swap may have put the new worker in the old one's place
        # meanwhile, and the old one shown with the new supervisor read as unsupervised
        # (not reloading) in the middle of the swap.
        return WorkersRead(
            [_read(traffic, i, u, scraped.get(u.url)) for i, u in enumerate(traffic.pool.upstreams)]
        )

    @post("/{index:int}/drain", status_code=200)
    async def drain(
        self, request: Request, gateway: NamedDependency[GatewayState], index: FromPath[int]
    ) -> WorkerRead:
        traffic = _traffic(request)
        upstream = _supervised_upstream(traffic, index)
        before = upstream.draining
        upstream.draining = True
        entry = action_entry(
            actor_of(request), "worker.drain", "worker", upstream.url,
            {"draining": before}, {"draining": True},
        )  # fmt: skip
        gateway.audit.submit(entry)
        return _read(traffic, index, upstream, None)

    @post("/{index:int}/restart", status_code=202)
    async def restart(
        self, request: Request, gateway: NamedDependency[GatewayState], index: FromPath[int]
    ) -> WorkerRead:
        traffic = _traffic(request)
        upstream = _supervised_upstream(traffic, index)
        _check_idle(traffic, "restart")
        traffic.restarting = asyncio.create_task(_restart(traffic, upstream), name="restart")
        entry = action_entry(
            actor_of(request), "worker.restart", "worker", upstream.url, status_code=202
        )
        gateway.audit.submit(entry)
        return _read(traffic, index, upstream, None)

    @post("/{index:int}/reload", status_code=202)
    async def reload(
        self,
        request: Request,
        gateway: NamedDependency[GatewayState],
        index: FromPath[int],
        data: JSONBody[WorkerReload],
    ) -> WorkerRead:
        """A weight swap (see workers/swap.py): answers at once; ``reloading`` is true in
        the view until it is over, and its outcome is the audit record worker.reloaded."""
        traffic = _traffic(request)
        upstream = _supervised_upstream(traffic, index)
        _check_idle(traffic, "reload")
        model = Path(data.model)
        if not model.is_absolute() or not model.exists():
            raise ClientException(
                status_code=400,
                detail=f"no model at {data.model} (an absolute path on the gateway's machine)",
            )
        swap = Swap(model, data.name, data.one_at_a_time, DRAIN_TIMEOUT_S)
        traffic.swap_error = ""
        traffic.swapping = asyncio.create_task(
            run_swap(traffic, upstream, swap, gateway.audit), name="weight-swap"
        )
        entry = action_entry(
            actor_of(request), "worker.reload", "worker", upstream.url, status_code=202,
            extra={"model": data.model, "name": data.name, "one_at_a_time": data.one_at_a_time},
        )  # fmt: skip
        gateway.audit.submit(entry)
        return _read(traffic, index, upstream, None)
