"""The scopes a request is limited by, built from freshly loaded rows on every request."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.domain.limits.types import Limits, Scope

if TYPE_CHECKING:  # only their attributes are read; a replica's limiter need not load the ORM
    from gateway.db.models import ApiKey, Department


def scopes_for(department: Department | None, api_key: ApiKey | None) -> list[Scope]:
    """The department's scope, then the key's own (a key is held to both)."""
    scopes = []
    if department is not None:
        scopes.append(_scope(f"dept:{department.id}", department, f"department {department.slug}"))
    if api_key is not None:
        scopes.append(_scope(f"key:{api_key.id}", api_key, f"key {api_key.name}"))
    return scopes


def _scope(key: str, row: Department | ApiKey, label: str) -> Scope:
    """Departments and keys name their limit columns alike."""
    limits = Limits(
        requests_per_minute=row.requests_per_minute,
        tokens_per_minute=row.tokens_per_minute,
        concurrent_requests=row.concurrent_requests,
        tokens_per_day=row.daily_token_quota,
        tokens_per_month=row.monthly_token_quota,
    )
    return Scope(key, limits, label)
