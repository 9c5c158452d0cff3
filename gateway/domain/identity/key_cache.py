"""The last good lookup of each API key, for riding out a database outage.

Every request still looks its key up in the database, so an admin's change (a revoked
key, a new quota) applies to the next request. Only when the database cannot be reached
does the gateway fall back to what it last read, so that apps keep working through a
restart of Postgres; an expired or revoked key stays refused from the snapshot too.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from gateway.db.base import as_utc, utc_now
from gateway.db.models import ApiKey, Department

MAX_AGE_S = 3600.0
MAX_ENTRIES = 10_000


class KeySnapshots:
    def __init__(self, max_age_s: float = MAX_AGE_S, max_entries: int = MAX_ENTRIES) -> None:
        self.max_age_s = max_age_s
        self.max_entries = max_entries
        self._entries: OrderedDict[str, tuple[float, ApiKey, Department | None]] = OrderedDict()

    def put(self, digest: str, key: ApiKey, department: Department | None) -> None:
        self._entries[digest] = (time.monotonic(), key, department)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def get(self, digest: str) -> tuple[ApiKey, Department | None] | None:
        found = self._entries.get(digest)
        if found is None or time.monotonic() - found[0] > self.max_age_s:
            return None
        _, key, department = found
        if key.revoked_at is not None:
            return None
        if key.expires_at is not None and as_utc(key.expires_at) <= utc_now():
            return None
        return key, department
