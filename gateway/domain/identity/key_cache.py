"""The last good lookup of each API key (with its department), used two ways.

While the config generation (gateway/config_generation.py) is the one the lookup was made
under, and the lookup is under a minute old, it is reused: no database query on the hot
path, yet an admin's change (a revoked key, a new quota) applies to the next request,
because every admin write moves the generation. And when the database cannot be reached
at all, the gateway falls back to the last lookup (up to an hour old), so apps keep
working through a restart of Postgres. An expired or revoked key is refused either way.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from gateway.db.base import as_utc, utc_now
from gateway.db.models import ApiKey, Department

MAX_AGE_S = 3600.0  # how stale a lookup may be while the database is down
FRESH_S = 60.0  # how long a lookup is reused while nothing changed (last_used_at resolution)
MAX_ENTRIES = 10_000


class KeySnapshots:
    def __init__(self, max_age_s: float = MAX_AGE_S, max_entries: int = MAX_ENTRIES) -> None:
        self.max_age_s = max_age_s
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, str | None, ApiKey, Department | None]] = (
            OrderedDict()
        )

    def put(
        self, digest: str, key: ApiKey, department: Department | None, generation: str | None
    ) -> None:
        self._entries[digest] = (time.monotonic(), generation, key, department)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def fresh(self, digest: str, generation: str | None) -> tuple[ApiKey, Department | None] | None:
        """The lookup, if it was made under ``generation`` less than a minute ago."""
        found = self._entries.get(digest)
        if generation is None or found is None or found[1] != generation:
            return None
        if time.monotonic() - found[0] > FRESH_S:
            return None
        return _usable(found[2], found[3])

    def get(self, digest: str) -> tuple[ApiKey, Department | None] | None:
        """The last lookup, however the generation moved (the database is down)."""
        found = self._entries.get(digest)
        if found is None or time.monotonic() - found[0] > self.max_age_s:
            return None
        return _usable(found[2], found[3])


def _usable(key: ApiKey, department: Department | None) -> tuple[ApiKey, Department | None] | None:
    if key.revoked_at is not None:
        return None
    if key.expires_at is not None and as_utc(key.expires_at) <= utc_now():
        return None
    return key, department
