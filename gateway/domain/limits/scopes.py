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
        scopes.append(
            Scope(
                f"dept:{department.id}",
                Limits(
                    requests_per_minute=department.requests_per_minute,
                    tokens_per_minute=department.tokens_per_minute,
                    concurrent_requests=department.concurrent_requests,
                    tokens_per_day=department.daily_token_quota,
                    tokens_per_month=department.monthly_token_quota,
                ),
                f"department {department.slug}",
            )
        )
    if api_key is not None:
        scopes.append(
            Scope(
                f"key:{api_key.id}",
                Limits(
                    requests_per_minute=api_key.requests_per_minute,
                    tokens_per_minute=api_key.tokens_per_minute,
                    concurrent_requests=api_key.concurrent_requests,
                    tokens_per_day=api_key.daily_token_quota,
                    tokens_per_month=api_key.monthly_token_quota,
                ),
                f"key {api_key.name}",
            )
        )
    return scopes
