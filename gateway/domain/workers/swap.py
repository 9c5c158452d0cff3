"""A weight swap of the supervised worker: a new model without downtime.

Side by side (the default): a new worker starts on the new model on another port, and once
its /ready answers it joins the pool. The pool holds it out of routing until the prefix
warmer has pinned the assistants on it (``hold_new_workers``), then it takes new requests;
the old worker drains (it takes none, what it runs finishes, up to ``drain_timeout``), is
stopped with SIGTERM, and the new one takes its place and index in the pool.

One at a time (``one_at_a_time``, where memory holds only one model): the old worker drains
and stops first, then the new one starts on the same port. Requests that come in the gap
find no worker and wait for it (``pick_through_swap`` in proxy/admission.py). A new model
that does not start brings the old one back.

Either way the outcome is an audit record ``worker.reloaded`` by the actor ``system``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

import structlog

from gateway.domain.audit.actions import SYSTEM, action_entry
from gateway.domain.audit.writer import AuditWriter
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.workers.pool import Upstream
from gateway.domain.workers.supervisor import WorkerStartError, WorkerSupervisor
from gateway.ports import free_port

log = structlog.get_logger("gateway.workers")


@dataclass(frozen=True, slots=True)
class Swap:
    model: Path
    name: str | None = None  # the served name; None: the new model's path stem
    one_at_a_time: bool = False
    drain_timeout: float = 30.0
    ready_timeout: float = 600.0


async def wait_drained(upstream: Upstream, timeout: float) -> bool:
    """Until nothing runs on ``upstream`` (its leases ended) or ``timeout``; whether it did."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while upstream.in_flight > 0:
        if loop.time() > deadline:
            log.warning(
                "worker did not drain in time", worker=upstream.url, left=upstream.in_flight
            )
            return False
        await asyncio.sleep(0.05)
    return True


async def _wait_routable(traffic: Traffic, upstream: Upstream, timeout: float) -> None:
    """Until the pool routes to ``upstream``: healthy, and its warming hold over."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    await traffic.pool.check(upstream)  # in at once, not at the next interval
    while not upstream.routable:
        if loop.time() > deadline:
            raise WorkerStartError(f"the new worker did not take requests within {timeout:g} s")
        await asyncio.sleep(0.05)
        if not upstream.healthy:
            await traffic.pool.check(upstream)


async def run_swap(traffic: Traffic, old_up: Upstream, swap: Swap, audit: AuditWriter) -> None:
    """The swap, start to end; its outcome is logged and audited, never raised."""
    old = traffic.supervisor
    assert old is not None  # the admin endpoint checked it
    error = ""
    try:
        if swap.one_at_a_time:
            await _one_at_a_time(traffic, old, old_up, swap)
        else:
            await _side_by_side(traffic, old, old_up, swap)
    except Exception as exc:  # the old worker is back in routing (see below)
        log.exception("weight swap failed", model=str(swap.model))
        error = str(exc)
    traffic.swap_error = error
    current = traffic.supervisor
    if current is not None and current.served_name != old.served_name:
        traffic.pool.forget(old.served_name)  # the old name is now a 404, not a 503
    details = {
        "model": str(swap.model),
        "name": current.served_name if current else "",
        "one_at_a_time": swap.one_at_a_time,
        "ok": not error,
        "error": error[:2000],
    }
    target = current.url if current else old_up.url
    audit.submit(action_entry(SYSTEM, "worker.reloaded", "worker", target, extra=details))


async def _side_by_side(
    traffic: Traffic, old: WorkerSupervisor, old_up: Upstream, swap: Swap
) -> None:
    new = old.sibling(swap.model, free_port(), swap.name)
    new_up: Upstream | None = None
    try:
        await new.start(ready_timeout=swap.ready_timeout)
        # From here the warmer pins the assistants on the new worker, not the old one.
        old_up.retiring = True
        new_up = traffic.pool.add(new.url)
        await _wait_routable(traffic, new_up, swap.ready_timeout)
    except BaseException:
        old_up.retiring = False
        if new_up is not None:
            traffic.pool.remove(new_up)
        await new.close(drain_timeout=5)
        raise
    log.info("weight swap: new worker takes requests; draining the old", new=new.url)
    old_up.draining = True  # new requests go to the new worker from here on
    traffic.supervisor = new
    traffic.pool.replace(old_up, new_up)
    await wait_drained(old_up, swap.drain_timeout)
    await old.close(drain_timeout=swap.drain_timeout)
    log.info("weight swap done", model=str(swap.model), url=new.url)


async def _one_at_a_time(
    traffic: Traffic, old: WorkerSupervisor, old_up: Upstream, swap: Swap
) -> None:
    old_up.draining = True
    try:
        await wait_drained(old_up, swap.drain_timeout)
        traffic.pool.mark_restarting(old_up)  # its return re-runs the on_healthy callbacks
        await old.close(drain_timeout=swap.drain_timeout)
        new = old.sibling(swap.model, old.port, swap.name)
        try:
            await new.start(ready_timeout=swap.ready_timeout)
        except WorkerStartError:
            log.error("weight swap: the new model did not start; bringing the old one back")
            back = old.sibling(old.model_path, old.port, old.served_name)
            await back.start(ready_timeout=swap.ready_timeout)
            traffic.supervisor = back
            raise
        traffic.supervisor = new
    finally:
        old_up.draining = False
        await traffic.pool.check(old_up)
