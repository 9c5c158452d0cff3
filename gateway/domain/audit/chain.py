"""The chain: each record's hash covers its values, its seq and the previous record's hash.

Changing any stored value of a record changes its hash; removing a record leaves a gap in
seq and a prev_hash that no longer matches. The hash is SHA-256 over canonical JSON
(sorted keys, no spaces, ASCII), so it is the same on every machine and database.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gateway.db.models import RequestRecord
from gateway.domain.audit.entry import FIELD_NAMES, AuditEntry

GENESIS_HASH = "0" * 64
CHAIN_ROW_ID = 1


def record_hash(prev_hash: str, seq: int, entry: AuditEntry) -> str:
    values = entry.plain()
    values["seq"] = seq
    values["prev_hash"] = prev_hash
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def entry_of(record: RequestRecord) -> AuditEntry:
    """What a stored record says, read back into an entry for hashing or export."""
    return AuditEntry(**{name: getattr(record, name) for name in FIELD_NAMES})


def record_values(seq: int, prev_hash: str, entry: AuditEntry) -> dict[str, Any]:
    """One row for ``insert(RequestRecord)``: the entry's values, its place and its hash."""
    values = {name: getattr(entry, name) for name in FIELD_NAMES}
    values.update(seq=seq, prev_hash=prev_hash, hash=record_hash(prev_hash, seq, entry))
    return values
