"""The gateway's Litestar application, built from one settings object."""

from __future__ import annotations

from typing import Any

from litestar import Litestar, get
from litestar.di import Provide

from gateway import __version__
from gateway.dependencies import provide_db, provide_principal, provide_state
from gateway.domain.departments.controllers import DepartmentController, GroupMappingController
from gateway.domain.identity.controllers import IdentityController, OidcController
from gateway.domain.identity.middleware import principal_middleware
from gateway.domain.keys.controllers import KeyController
from gateway.domain.users.controllers import UserController
from gateway.errors import EXCEPTION_HANDLERS
from gateway.request_context import request_id_middleware
from gateway.settings import Settings
from gateway.state import GatewayState


@get("/health", sync_to_thread=False)
def health() -> dict[str, str]:
    """Liveness: the process is up and answering."""
    return {"status": "ok", "version": __version__}


# Routes anyone may call; every other route needs a session or a key (tests check this).
PUBLIC_PATHS = frozenset({"/health", "/auth/local/login", "/auth/login", "/auth/callback"})


def create_app(settings: Settings, extra_route_handlers: list[Any] | None = None) -> Litestar:
    gateway = GatewayState.build(settings)

    async def close_state() -> None:
        await gateway.close()

    app = Litestar(
        route_handlers=[
            health,
            IdentityController,
            OidcController,
            DepartmentController,
            GroupMappingController,
            UserController,
            KeyController,
            *(extra_route_handlers or []),
        ],
        middleware=[request_id_middleware, principal_middleware],
        dependencies={
            "db": Provide(provide_db),
            "gateway": Provide(provide_state, sync_to_thread=False),
            "principal": Provide(provide_principal, sync_to_thread=False),
        },
        exception_handlers=EXCEPTION_HANDLERS,  # type: ignore[arg-type]
        on_shutdown=[close_state],
        logging_config=None,  # structlog is configured by the CLI, once per process
        openapi_config=None,
    )
    app.state.settings = settings
    app.state.gateway = gateway
    return app
