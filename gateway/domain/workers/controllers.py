"""`GET /api/status`: the models the caller may use and whether they can answer now."""

from __future__ import annotations

from functools import partial

from litestar import Controller, Request, get
from litestar.di import NamedDependency

from gateway.domain.identity.guards import require_user_or_key
from gateway.domain.identity.principal import Principal
from gateway.domain.proxy.admission import allowed
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.workers.status import StatusRead, model_status


class StatusController(Controller):
    @get("/api/status", guards=[require_user_or_key])
    async def status(self, request: Request, principal: NamedDependency[Principal]) -> StatusRead:
        """The same allow-lists as /v1/models; a signed-in user in no department, whom the
        API refuses, sees no models."""
        traffic: Traffic = request.app.state.traffic
        if principal.api_key is None and principal.department is None:
            return model_status(traffic.pool, lambda _: False)
        return model_status(traffic.pool, partial(allowed, principal))
