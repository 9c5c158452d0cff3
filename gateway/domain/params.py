"""Query parameters read by hand (filters whose values the handler checks itself): each
refusal is a ValueError naming the parameter, which the app answers with 400."""

from __future__ import annotations

import uuid


def optional_uuid(name: str, raw: str | None) -> uuid.UUID | None:
    if not raw:
        return None
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ValueError(f"{name}: not a UUID: {raw!r}") from None
