"""One API request's accounting, from the first byte to the audit record.

Whatever happens to a request (refused, rejected by the worker, cancelled by the client,
broken mid-stream), `finish` runs exactly once: it settles the token reservation to what
was really used and hands one record to the audit writer. Neither waits on the client, and
a settlement that fails never costs the audit record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

import structlog

from gateway.db.base import utc_now
from gateway.domain.audit.entry import AuditEntry, cap_body
from gateway.domain.identity.principal import Principal
from gateway.domain.proxy.sse import Usage

if TYPE_CHECKING:
    from gateway.domain.limits.types import Reservation
    from gateway.domain.proxy.traffic import Traffic

log = structlog.get_logger("gateway.proxy")


@dataclass(slots=True)
class Exchange:
    traffic: Traffic
    principal: Principal
    endpoint: str
    request_id: str
    client_ip: str
    user_agent: str
    started: float = field(default_factory=time.perf_counter)
    started_at: datetime = field(default_factory=utc_now)
    model: str = ""
    streamed: bool = False
    estimated_prompt_tokens: int = 0
    reservation: Reservation | None = None
    upstream: str = ""
    prompt_body: str | None = None
    finished: bool = False
    client_request_id: str = ""  # the caller's X-Request-Id, if it sent a plain one

    @property
    def keeps_bodies(self) -> bool:
        department = self.principal.department
        return bool(department is not None and department.audit_bodies)

    def keep_prompt(self, raw: bytes) -> None:
        if self.keeps_bodies:
            limit = self.traffic.settings.audit_body_max_bytes
            self.prompt_body = cap_body(raw.decode("utf-8", "replace"), limit)

    async def finish(
        self,
        status: int,
        usage: Usage | None = None,
        *,
        reason: str = "",
        error: str = "",
        first_token_at: float | None = None,
        response_body: str | None = None,
        completion_chunks: int = 0,
    ) -> None:
        if self.finished:
            return
        self.finished = True
        if usage is None and self.reservation is not None:
            # No usage chunk (cancelled or broken): charge what the worker surely spent.
            usage = Usage(self.estimated_prompt_tokens, completion_chunks, 0)
        try:
            if self.reservation is not None:
                await self._settle(self.reservation, usage.total if usage else 0)
        finally:  # even when cancelled mid-settlement: one record per request, always
            self.traffic.metrics.observe(self, status, usage, reason)
            self.traffic.audit.submit(
                self._entry(status, usage, reason, error, first_token_at, response_body)
            )

    async def _settle(self, reservation: Reservation, used: int) -> None:
        """Settle, or log and count why not. The limiters free a request's concurrency
        slots before anything else in a settlement can fail; when the settlement does not
        run at all, the slot's lease (15 minutes) frees it."""
        try:
            await self.traffic.limiter.settle(reservation, used)
        except Exception as exc:
            self.traffic.metrics.settle_failures.inc()
            log.error(
                "limits_settle_failed",
                request_id=self.request_id,
                reservation=reservation.id,
                error=f"{type(exc).__name__}: {exc}",
            )

    def _entry(
        self,
        status: int,
        usage: Usage | None,
        reason: str,
        error: str,
        first_token_at: float | None,
        response_body: str | None,
    ) -> AuditEntry:
        principal = self.principal
        user = principal.user
        department = principal.department
        keep = self.keeps_bodies
        limit = self.traffic.settings.audit_body_max_bytes
        return AuditEntry(
            created_at=self.started_at,
            request_id=self.request_id,
            client_request_id=self.client_request_id,
            status_code=status,
            endpoint=self.endpoint,
            model=self.model,
            user_id=user.id if user else None,
            user_email=user.email if user else "",
            api_key_id=principal.api_key.id if principal.api_key else None,
            department_id=department.id if department else None,
            department_slug=department.slug if department else "",
            streamed=self.streamed,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            cached_tokens=usage.cached_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0,
            ttft_ms=_ms(first_token_at - self.started) if first_token_at else None,
            latency_ms=_ms(time.perf_counter() - self.started),
            client_ip=self.client_ip,
            user_agent=self.user_agent[:500],
            upstream=self.upstream,
            reason=reason,
            error=error[:1000],
            prompt_body=self.prompt_body if keep else None,
            response_body=cap_body(response_body, limit) if keep and response_body else None,
        )


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
