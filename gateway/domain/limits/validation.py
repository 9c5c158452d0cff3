"""What the admin API accepts as a limit, shared by departments and keys."""

from __future__ import annotations

from collections.abc import Mapping

# The limit columns, named as on both the departments and the api_keys tables.
LIMIT_FIELDS = (
    "requests_per_minute",
    "tokens_per_minute",
    "concurrent_requests",
    "daily_token_quota",
    "monthly_token_quota",
)


def check_limit_values(values: Mapping[str, object]) -> None:
    """Limits are positive or null (unlimited): a 0 would refuse every request, silently."""
    for name in LIMIT_FIELDS:
        value = values.get(name)
        if isinstance(value, int) and value < 1:
            raise ValueError(f"{name} must be a positive number, or null for no limit")
