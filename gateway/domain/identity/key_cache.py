"""The last good lookup of each API key (with its department), used two ways.

While the config generation (gateway/config_generation.py) is the one the lookup was made
under, and the lookup is recent, it is reused: no database query on the hot path, yet an
admin's change (a revoked key, a new quota) applies to the next request, because every
admin write moves the generation. And when the database cannot be reached at all, a key is
served from its last lookup only if that lookup is younger than the outage grace
(``ENCLAVE_KEY_OUTAGE_GRACE_SECONDS``) and, when the generation can be read, no admin
write has happened since: apps keep working through a short restart of Postgres, while a
revocation made before the outage is not undone by it.

It holds frozen snapshots (snapshots.py), never ORM rows: entries outlive the database
session and event loop that loaded them.

Revocation wins: a key that any lookup found revoked, expired or unknown is dropped and
remembered as dead, so neither reuse nor the outage fallback can serve it again (not even
a slower lookup that saw it live before the revocation and stores its result after).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from gateway.db.base import as_utc, utc_now
from gateway.domain.identity.snapshots import DepartmentSnapshot, KeySnapshot

DEFAULT_OUTAGE_GRACE_S = 300.0
FRESH_S = 60.0  # how long a lookup is reused while nothing changed (last_used_at resolution)
MAX_ENTRIES = 10_000

CachedKey = tuple[KeySnapshot, DepartmentSnapshot | None]


@dataclass(frozen=True, slots=True)
class _Lookup:
    validated_at: float  # the clock (time.monotonic) at the database lookup
    generation: str | None
    key: KeySnapshot
    department: DepartmentSnapshot | None


class KeySnapshots:
    def __init__(
        self,
        outage_grace_s: float = DEFAULT_OUTAGE_GRACE_S,
        max_entries: int = MAX_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if outage_grace_s < 0:
            raise ValueError("outage_grace_s must not be negative")
        self.outage_grace_s = outage_grace_s
        # Reuse never outlives the grace: with a grace of 0 every request asks the database,
        # so no key is ever served on a lookup the database could not have contradicted.
        self.fresh_s = min(FRESH_S, outage_grace_s)
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, _Lookup] = OrderedDict()
        # Digests seen revoked, expired or unknown. Each state is final (a key cannot be
        # un-revoked, its expiry only moves earlier, and keys are random), so forever.
        self._dead: OrderedDict[str, None] = OrderedDict()

    def put(
        self,
        digest: str,
        key: KeySnapshot,
        department: DepartmentSnapshot | None,
        generation: str | None,
    ) -> None:
        if digest in self._dead:
            return
        self._entries[digest] = _Lookup(self._clock(), generation, key, department)
        self._entries.move_to_end(digest)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, digest: str) -> None:
        """A lookup found the key revoked, expired or unknown: never serve it from here."""
        self._entries.pop(digest, None)
        self._dead[digest] = None
        self._dead.move_to_end(digest)
        while len(self._dead) > self.max_entries:
            self._dead.popitem(last=False)

    def is_dead(self, digest: str) -> bool:
        return digest in self._dead

    def fresh(self, digest: str, generation: str | None) -> CachedKey | None:
        """The lookup, if it was made under ``generation`` a short while ago."""
        found = self._entries.get(digest)
        if generation is None or found is None or found.generation != generation:
            return None
        if self._clock() - found.validated_at > self.fresh_s:
            return None
        return self._usable(digest, found)

    def during_outage(self, digest: str, generation: str | None) -> CachedKey | None:
        """The last lookup while the database is down: only within the grace, and only if
        no admin write has moved the generation since (unknown when Redis is down too)."""
        found = self._entries.get(digest)
        if found is None or self._clock() - found.validated_at > self.outage_grace_s:
            return None
        if generation is not None and found.generation != generation:
            return None
        return self._usable(digest, found)

    def _usable(self, digest: str, found: _Lookup) -> CachedKey | None:
        key = found.key
        expired = key.expires_at is not None and as_utc(key.expires_at) <= utc_now()
        if key.revoked_at is not None or expired:
            self.forget(digest)
            return None
        return key, found.department
