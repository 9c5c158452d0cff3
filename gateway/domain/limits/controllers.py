"""`GET /api/me/usage`: what the caller's department has used of its token quotas."""

from __future__ import annotations

from litestar import Controller, Request, get
from litestar.di import NamedDependency

from gateway.domain.identity.guards import require_user_or_key
from gateway.domain.identity.principal import Principal
from gateway.domain.limits.usage import UsageRead, department_usage
from gateway.domain.proxy.traffic import Traffic


class UsageController(Controller):
    @get("/api/me/usage", guards=[require_user_or_key])
    async def usage(self, request: Request, principal: NamedDependency[Principal]) -> UsageRead:
        """Tokens used today and this month (UTC) by the caller's department, against its
        quotas; a 503 when the limits store (Redis) cannot be reached."""
        traffic: Traffic = request.app.state.traffic
        return await department_usage(traffic.limiter, principal.department)
