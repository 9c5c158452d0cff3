"""Admin actions and sign-ins as audit records, in the same chain as API requests.

A controller calls :func:`record_admin_action` with what it changed, before and after; the
record waits in the request's state and goes to the audit writer only once the request's
transaction has committed (``submit_pending``, from ``provide_db``), so the log never
claims a change that was rolled back. Sign-ins and sign-outs change nothing to roll back
and are submitted at once (:func:`record_auth_event`). The CLI, which has no writer, builds
its entries with ``actions.action_entry`` and appends them in its own transaction.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from litestar import Request

from gateway.db.models import User
from gateway.domain.audit.actions import Actor, action_entry
from gateway.domain.audit.writer import AuditWriter
from gateway.domain.identity.guards import principal_of

PENDING_KEY = "audit_pending"


def actor_of(request: Request[Any, Any, Any], user: User | None = None) -> Actor:
    """The signed-in user making ``request`` (or ``user``, for a sign-in), and from where."""
    principal = principal_of(request)
    who = user or principal.user
    department = principal.department if user is None else None
    state = request.scope.get("state", {})
    return Actor(
        email=who.email if who else "",
        user_id=who.id if who else None,
        department_id=department.id if department else (who.department_id if who else None),
        department_slug=department.slug if department else "",
        client_ip=request.client.host if request.client else "",
        user_agent=request.headers.get("user-agent", ""),
        request_id=str(state.get("request_id", "")),
        client_request_id=str(state.get("client_request_id", "")),
        endpoint=request.url.path,
    )


def record_admin_action(
    request: Request[Any, Any, Any],
    action: str,
    target_type: str,
    target_id: object,
    before: object = None,
    after: object = None,
    **extra: Any,
) -> None:
    """Log ``action`` by the request's admin once the request's transaction commits:
    ``before`` and ``after`` (structs; None for a create or delete) give what changed,
    ``extra`` anything else worth keeping (JSON values)."""
    status = request.route_handler.status_code or 200
    actor = actor_of(request)
    entry = action_entry(
        actor, action, target_type, target_id, before, after, status_code=status, extra=extra
    )
    request.scope.setdefault("state", {}).setdefault(PENDING_KEY, []).append(entry)


def submit_pending(request: Request[Any, Any, Any], writer: AuditWriter) -> None:
    for entry in request.scope.get("state", {}).pop(PENDING_KEY, []):
        writer.submit(entry)


def record_auth_event(
    request: Request[Any, Any, Any],
    writer: AuditWriter,
    action: str,
    user: User | None = None,
    **details: Any,
) -> None:
    """A sign-in (of ``user``) or sign-out (of the request's user), submitted at once."""
    actor = actor_of(request, user)
    writer.submit(action_entry(actor, action, "user", actor.user_id, extra=details))


def record_login_failed(
    request: Request[Any, Any, Any],
    writer: AuditWriter,
    email: str,
    status: int = 401,
    **details: Any,
) -> None:
    """A refused sign-in, under the address that was tried (the password never), whoever
    the browser may already be signed in as."""
    actor = dataclasses.replace(
        actor_of(request),
        email=email.strip().lower(),
        user_id=None,
        department_id=None,
        department_slug="",
    )
    entry = action_entry(
        actor, "auth.login_failed", "user", None, status_code=status, extra=details
    )
    writer.submit(entry)
