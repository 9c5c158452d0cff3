"""The gateway's Litestar application, built from one settings object."""

from __future__ import annotations

from litestar import Litestar, get

from gateway import __version__
from gateway.request_context import request_id_middleware
from gateway.settings import Settings


@get("/health", sync_to_thread=False)
def health() -> dict[str, str]:
    """Liveness: the process is up and answering."""
    return {"status": "ok", "version": __version__}


def create_app(settings: Settings) -> Litestar:
    app = Litestar(
        route_handlers=[health],
        middleware=[request_id_middleware],
        logging_config=None,  # structlog is configured by the CLI, once per process
        openapi_config=None,
    )
    app.state.settings = settings
    return app
