"""Service exceptions to JSON responses with a clear message."""

from __future__ import annotations

from typing import Any

import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException
from sqlalchemy.exc import IntegrityError

from gateway.web_app import app_page

log = structlog.get_logger("gateway.errors")


class NotFoundError(LookupError):
    """A service could not find what it was asked for (404)."""


def _json(
    status: int, message: str, headers: dict[str, str] | None = None
) -> Response[dict[str, object]]:
    return Response({"status_code": status, "detail": message}, status_code=status, headers=headers)


def http_error(_: Request, exc: HTTPException) -> Response[dict[str, object]]:
    # Litestar's own exceptions (some subclass ValueError) keep their status, message and
    # headers (a 429's Retry-After); a validation error adds what msgspec said, so the
    # client learns which field is wrong.
    problems = [e for e in exc.extra or [] if isinstance(e, dict) and "message" in e]
    reasons = [f"{e['key']}: {e['message']}" if e.get("key") else e["message"] for e in problems]
    detail = f"{exc.detail}: {'; '.join(reasons)}" if reasons else exc.detail
    return _json(exc.status_code, detail, dict(exc.headers or {}))


def route_not_found(request: Request, exc: NotFoundException) -> Response[Any]:
    """A path no route matched: the web app's page when the path is the app's, else JSON."""
    return app_page(request, exc) or http_error(request, exc)


def not_found(_: Request, exc: NotFoundError) -> Response[dict[str, object]]:
    return _json(404, str(exc.args[0]) if exc.args else "not found")


def bad_request(_: Request, exc: ValueError) -> Response[dict[str, object]]:
    return _json(400, str(exc))


def unauthorized(_: Request, exc: PermissionError) -> Response[dict[str, object]]:
    return _json(401, str(exc))


def unavailable(_: Request, exc: ConnectionError) -> Response[dict[str, object]]:
    return _json(503, str(exc))


def conflict(_: Request, _exc: IntegrityError) -> Response[dict[str, object]]:
    return _json(409, "that conflicts with an existing record (a name or slug already used?)")


def internal_error(request: Request, exc: Exception) -> Response[dict[str, object]]:
    # The last resort, and the one place such an error is logged: Litestar logs nothing
    # itself with logging_config=None. Bad input never gets here; it is a 4xx at its cause.
    log.error("unhandled error", method=request.method, path=request.url.path, exc_info=exc)
    return _json(500, "the gateway failed on this request; its log has the details")


EXCEPTION_HANDLERS: dict[type[Exception], object] = {
    HTTPException: http_error,
    NotFoundException: route_not_found,
    NotFoundError: not_found,
    ValueError: bad_request,
    IntegrityError: conflict,
    PermissionError: unauthorized,
    ConnectionError: unavailable,
    Exception: internal_error,
}
