"""Ending an API request: settle its reservation, count it in the metrics, audit it.

Whatever happens to a request (refused, rejected by the worker, cancelled by the client,
broken mid-stream), `Accounting.finish` runs exactly once: it settles the token reservation
to what was really used, observes the outcome in the metrics and hands one record to the
audit writer. Neither waits on the client, and a settlement that fails never costs the
audit record. The limiter, metrics and audit writer are handed in by the caller; nothing
here reaches for them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec
import structlog

from gateway.domain.audit.entry import AuditEntry, cap_body
from gateway.domain.audit.writer import AuditWriter
from gateway.domain.limits.types import Limiter, Reservation
from gateway.domain.proxy.exchange import Ending, Exchange
from gateway.domain.proxy.metrics import GatewayMetrics, Outcome
from gateway.domain.proxy.sse import Usage

log = structlog.get_logger("gateway.proxy")

# The audit details of a request the web UI made: one signed in with a session, not a key
# (the UI never holds a key). An API request has no details, unless it named an assistant:
# then they say which, and which version ({"assistant": slug, "assistant_version": n}).
VIA_UI = '{"via":"ui"}'


@dataclass(frozen=True, slots=True)
class Accounting:
    limiter: Limiter
    metrics: GatewayMetrics
    audit: AuditWriter

    async def finish(self, exchange: Exchange, ending: Ending) -> None:
        if exchange.finished:
            return
        exchange.finished = True
        usage = ending.usage
        if usage is None and exchange.reservation is not None:
            # No usage chunk (cancelled or broken): charge what the worker surely spent.
            usage = Usage(exchange.estimated_prompt_tokens, ending.completion_chunks, 0)
        try:
            if exchange.reservation is not None:
                used = usage.total if usage else 0
                await self._settle(exchange.request_id, exchange.reservation, used)
        finally:  # even when cancelled mid-settlement: one record per request, always
            elapsed = time.perf_counter() - exchange.started
            self.metrics.observe(_outcome(exchange, ending, usage, elapsed))
            self.audit.submit(_entry(exchange, ending, usage, elapsed))

    async def _settle(self, request_id: str, reservation: Reservation, used: int) -> None:
        """Settle, or log and count why not. The limiters free a request's concurrency
        slots before anything else in a settlement can fail; one that cannot reach Redis is
        retried until it does (limits/unsettled.py), and only a gateway that dies meanwhile
        leaves the slot to its lease (15 minutes)."""
        try:
            await self.limiter.settle(reservation, used)
        except Exception as exc:
            self.metrics.settle_failures.inc()
            log.error(
                "limits_settle_failed",
                request_id=request_id,
                reservation=reservation.id,
                error=f"{type(exc).__name__}: {exc}",
            )


def _outcome(exchange: Exchange, ending: Ending, usage: Usage | None, elapsed: float) -> Outcome:
    department = exchange.principal.department
    return Outcome(
        endpoint=exchange.endpoint,
        status=ending.status,
        reason=ending.reason,
        usage=usage,
        department_slug=department.slug if department else "",
        duration_s=elapsed,
    )


def _entry(exchange: Exchange, ending: Ending, usage: Usage | None, elapsed: float) -> AuditEntry:
    principal = exchange.principal
    user = principal.user
    department = principal.department
    keep = exchange.keeps_bodies
    first_token_at = ending.first_token_at
    response_body = ending.response_body
    return AuditEntry(
        created_at=exchange.started_at,
        request_id=exchange.request_id,
        client_request_id=exchange.client_request_id,
        status_code=ending.status,
        endpoint=exchange.endpoint,
        model=exchange.model,
        user_id=user.id if user else None,
        user_email=user.email if user else "",
        api_key_id=principal.api_key.id if principal.api_key else None,
        department_id=department.id if department else None,
        department_slug=department.slug if department else "",
        streamed=exchange.streamed,
        prompt_tokens=usage.prompt_tokens if usage else 0,
        cached_tokens=usage.cached_tokens if usage else 0,
        completion_tokens=usage.completion_tokens if usage else 0,
        ttft_ms=_ms(first_token_at - exchange.started) if first_token_at else None,
        latency_ms=_ms(elapsed),
        client_ip=exchange.client_ip,
        user_agent=exchange.user_agent[:500],
        upstream=exchange.upstream,
        reason=ending.reason,
        error=ending.error[:1000],
        prompt_body=exchange.prompt_body if keep else None,
        response_body=cap_body(response_body, exchange.body_cap)
        if keep and response_body
        else None,
        details=_details(exchange),
    )


def _details(exchange: Exchange) -> str | None:
    principal = exchange.principal
    via_ui = principal.session is not None and principal.api_key is None
    if not exchange.assistant:
        return VIA_UI if via_ui else None
    details: dict[str, object] = {"via": "ui"} if via_ui else {}
    details["assistant"] = exchange.assistant
    details["assistant_version"] = exchange.assistant_version
    return msgspec.json.encode(details).decode()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
