"""The gateway's Litestar application, built from one settings object."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from litestar import Litestar, Request, get
from litestar.di import Provide
from opentelemetry.sdk.trace import TracerProvider

from gateway import __version__
from gateway.dependencies import provide_db, provide_principal, provide_state
from gateway.domain.assistants.controllers import AssistantAdminController, AssistantController
from gateway.domain.audit.controllers import AuditController
from gateway.domain.conversations.controllers import ConversationController
from gateway.domain.departments.controllers import DepartmentController, GroupMappingController
from gateway.domain.identity.controllers import IdentityController, OidcController
from gateway.domain.identity.middleware import principal_middleware
from gateway.domain.keys.controllers import KeyController
from gateway.domain.limits.controllers import UsageController
from gateway.domain.proxy.entry import put_api_first
from gateway.domain.proxy.handlers import chat_completions, completions, models
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.usage.controllers import AdminUsageController
from gateway.domain.users.controllers import UserController
from gateway.domain.workers.admin import WorkerAdminController
from gateway.domain.workers.controllers import StatusController
from gateway.domain.workers.restarts import record_restarts
from gateway.domain.workers.supervisor import WorkerSupervisor
from gateway.errors import EXCEPTION_HANDLERS
from gateway.json_request import GatewayRequest
from gateway.openapi import DOCUMENT_ROUTES, openapi_config
from gateway.request_context import request_id_middleware
from gateway.settings import Settings
from gateway.state import GatewayState
from gateway.traffic_setup import build_traffic
from gateway.web_app import ASSETS_ROUTE, WebApp, default_root


@get("/health", sync_to_thread=False)
def health() -> dict[str, str]:
    """Liveness: the process is up and answering."""
    return {"status": "ok", "version": __version__}


# Routes anyone may call; every other route needs a session or a key (tests check this).
PUBLIC_PATHS = frozenset(
    {"/health", "/metrics", "/auth/local/login", "/auth/login", "/auth/callback", "/auth/methods"}
    | DOCUMENT_ROUTES
    | {ASSETS_ROUTE}  # the web app's built files (only when it is built)
)


@get("/metrics", sync_to_thread=False, media_type="text/plain; version=0.0.4")
def metrics(request: Request) -> bytes:
    """Prometheus: requests, refusals by reason, latency, tokens by department, upstreams."""
    traffic: Traffic = request.app.state.traffic
    audit = provide_state(request).audit
    return traffic.metrics.render(
        traffic.pool, audit.pending, audit.spooled, traffic.limiter.pending_settlements
    )


def create_app(
    settings: Settings,
    extra_route_handlers: list[Any] | None = None,
    *,
    supervisor: WorkerSupervisor | None = None,
    tracer_provider: TracerProvider | None = None,
) -> Litestar:
    """The gateway; ``supervisor`` is the embedded default's own worker, started with it."""
    gateway = GatewayState.build(settings)
    web = WebApp.load(Path(settings.ui_dir) if settings.ui_dir else default_root())
    traffic = build_traffic(settings, gateway, supervisor, tracer_provider)
    # The warmer pins on the proxy's workers, re-syncing whenever one becomes healthy.
    gateway.warmer.attach(traffic.pool, traffic.worker_token)
    if supervisor is not None:
        record_restarts(supervisor, traffic.metrics, gateway.audit)

    async def start_state() -> None:
        await gateway.start()
        await traffic.start()
        await gateway.warmer.start()  # its first sync runs before the gateway serves

    async def close_state() -> None:
        await gateway.warmer.close()  # before the pool and the database it uses
        await traffic.close()
        await gateway.close()

    app = Litestar(
        route_handlers=[
            health,
            metrics,
            chat_completions,
            completions,
            models,
            IdentityController,
            OidcController,
            DepartmentController,
            GroupMappingController,
            UserController,
            KeyController,
            AuditController,
            ConversationController,
            AssistantAdminController,
            AssistantController,
            UsageController,
            AdminUsageController,
            StatusController,
            WorkerAdminController,
            *(web.routes() if web else []),
            *(extra_route_handlers or []),
        ],
        middleware=[request_id_middleware, principal_middleware],
        dependencies={
            "db": Provide(provide_db),
            "gateway": Provide(provide_state, sync_to_thread=False),
            "principal": Provide(provide_principal, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        request_class=GatewayRequest,
        on_startup=[start_state],
        on_shutdown=[close_state],
        logging_config=None,  # structlog is configured by the CLI, once per process
        openapi_config=openapi_config(PUBLIC_PATHS),
    )
    app.state.gateway = gateway
    app.state.traffic = traffic
    app.state.web = web
    put_api_first(app)
    return app
