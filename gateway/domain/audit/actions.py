"""An audit record of something done (not an API request): who, what, to which thing, and
what changed. Built here for the admin API and sign-ins (``events``), the CLI and the
retention job; chained like every other record."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec

from gateway.db.base import utc_now
from gateway.domain.audit.entry import AuditEntry

# Never written to the log, whatever a schema carries.
SECRET_FIELDS = frozenset({"key", "key_hash", "password", "password_hash", "secret", "token"})


@dataclass(frozen=True, slots=True)
class Actor:
    """Who did it, from where: a user, or a name such as "cli" with no user id."""

    email: str
    user_id: uuid.UUID | None = None
    department_id: uuid.UUID | None = None
    department_slug: str = ""
    client_ip: str = ""
    user_agent: str = ""
    request_id: str = ""
    client_request_id: str = ""
    endpoint: str = ""


CLI = Actor(email="cli")
SYSTEM = Actor(email="system")  # the gateway's own jobs (retention)


def action_entry(
    actor: Actor,
    action: str,
    target_type: str,
    target_id: object,
    before: object = None,
    after: object = None,
    *,
    status_code: int = 200,
    extra: dict[str, Any] | None = None,
) -> AuditEntry:
    """One record of ``action`` on a target; ``details`` holds what changed (and ``extra``)."""
    details = {**changes(before, after), **(extra or {})}
    return AuditEntry(
        created_at=utc_now(),
        request_id=actor.request_id or f"act-{uuid.uuid4().hex}",
        client_request_id=actor.client_request_id,
        status_code=status_code,
        endpoint=actor.endpoint,
        user_id=actor.user_id,
        user_email=actor.email,
        department_id=actor.department_id,
        department_slug=actor.department_slug,
        client_ip=actor.client_ip,
        user_agent=actor.user_agent,
        action=action,
        target_type=target_type,
        target_id="" if target_id is None else str(target_id),
        details=json.dumps(details, sort_keys=True, ensure_ascii=False) if details else None,
    )


def changes(before: object, after: object) -> dict[str, Any]:
    """``{"before": ..., "after": ...}`` of the fields that differ (all of them for a create
    or a delete), as JSON values, secrets left out."""
    old, new = _plain(before), _plain(after)
    if old is not None and new is not None:
        changed = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        return {
            "before": {k: old.get(k) for k in changed},
            "after": {k: new.get(k) for k in changed},
        }
    return {name: value for name, value in (("before", old), ("after", new)) if value is not None}


def _plain(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    plain = msgspec.to_builtins(value)
    if not isinstance(plain, dict):
        raise ValueError(f"audit details must be a struct or a mapping, not {type(value)}")
    return {k: v for k, v in plain.items() if k not in SECRET_FIELDS}
