"""Route guards: 401 without credentials, 403 without the right; CSRF for session writes."""

from __future__ import annotations

import hmac

from litestar.connection import ASGIConnection
from litestar.exceptions import HTTPException, NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler

from gateway.domain.identity.middleware import PRINCIPAL_KEY
from gateway.domain.identity.principal import CSRF_HEADER, Principal
from gateway.domain.identity.session_store import SessionData

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def principal_of(connection: ASGIConnection) -> Principal:
    found = connection.scope.get("state", {}).get(PRINCIPAL_KEY)
    return found if isinstance(found, Principal) else Principal()


def csrf_ok(session: SessionData, method: str, sent: str) -> bool:
    """Whether a session's request may proceed: reads always, writes only when they echo
    the session's CSRF token (``sent``, from the X-CSRF-Token header). The routes' guards
    and the OpenAI API's handlers both ask this."""
    return method in SAFE_METHODS or hmac.compare_digest(sent.encode(), session.csrf_token.encode())


def require_user(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """A signed-in user (session cookie); writes must echo the session's CSRF token."""
    principal = principal_of(connection)
    if principal.user is None or principal.session is None:
        raise NotAuthorizedException("sign in first")
    method = str(connection.scope.get("method", "GET"))
    if not csrf_ok(principal.session, method, connection.headers.get(CSRF_HEADER, "")):
        raise PermissionDeniedException("missing or wrong CSRF token")


def require_admin(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    require_user(connection, handler)
    if not principal_of(connection).is_admin:
        raise PermissionDeniedException("admins only")


def require_user_or_key(connection: ASGIConnection, handler: BaseRouteHandler) -> None:
    if principal_of(connection).api_key is None:
        require_user(connection, handler)


def require_json(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """JSON bodies only: a cross-site form (text/plain, urlencoded, multipart) cannot send
    JSON without a CORS preflight, so this refuses login CSRF before the body is read."""
    media_type = connection.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        raise HTTPException(status_code=415, detail="send the body as application/json")
