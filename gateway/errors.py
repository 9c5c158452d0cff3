"""Service exceptions to JSON responses with a clear message."""

from __future__ import annotations

from litestar import Request, Response
from litestar.exceptions import HTTPException
from sqlalchemy.exc import IntegrityError


class NotFoundError(LookupError):
    """A service could not find what it was asked for (404)."""


def _json(
    status: int, message: str, headers: dict[str, str] | None = None
) -> Response[dict[str, object]]:
    return Response({"status_code": status, "detail": message}, status_code=status, headers=headers)


def http_error(_: Request, exc: HTTPException) -> Response[dict[str, object]]:
    # Litestar's own exceptions (some subclass ValueError) keep their status, message and
    # headers (a 429's Retry-After).
    return _json(exc.status_code, exc.detail, dict(exc.headers or {}))


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


EXCEPTION_HANDLERS: dict[type[Exception], object] = {
    HTTPException: http_error,
    NotFoundError: not_found,
    ValueError: bad_request,
    IntegrityError: conflict,
    PermissionError: unauthorized,
    ConnectionError: unavailable,
}
