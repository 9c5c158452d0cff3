"""The chain: each record's hash covers its values, its seq and the previous record's hash.

Changing any stored value of a record changes its hash; removing a record leaves a gap in
seq and a prev_hash that no longer matches. The hash is an HMAC-SHA256, keyed by a key
derived from the gateway's secret (never stored in the database), over canonical JSON
(sorted keys, no spaces, ASCII): someone who can write to the database but does not hold
the secret cannot compute a hash for an edited or invented record.

Records written before keying existed (seq below ``audit_chain.keyed_from_seq``) were
hashed with plain SHA-256 over the columns they had then; :func:`unkeyed_hash` checks them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from gateway.db.models import RequestRecord
from gateway.domain.audit.entry import FIELD_NAMES, UNKEYED_FIELD_NAMES, AuditEntry

GENESIS_HASH = "0" * 64
CHAIN_ROW_ID = 1
# Changing this label (or the derivation) makes every keyed record unverifiable.
KEY_LABEL = b"enclave audit chain v1"


def chain_key(secret_key: str) -> bytes:
    """The chain's HMAC key: derived from the secret, so the secret itself keys nothing else
    by accident and a leaked chain key does not reveal it."""
    if not secret_key:
        raise ValueError("the audit chain needs the gateway's secret key")
    return hmac.new(secret_key.encode("utf-8"), KEY_LABEL, hashlib.sha256).digest()


def record_hash(key: bytes, prev_hash: str, seq: int, entry: AuditEntry) -> str:
    return hmac.new(key, _canonical(entry.plain(), seq, prev_hash), hashlib.sha256).hexdigest()


def unkeyed_hash(prev_hash: str, seq: int, entry: AuditEntry) -> str:
    """How records before ``keyed_from_seq`` were hashed: SHA-256 over their old columns."""
    plain = entry.plain()
    values = {name: plain[name] for name in UNKEYED_FIELD_NAMES}
    return hashlib.sha256(_canonical(values, seq, prev_hash)).hexdigest()


def _canonical(values: dict[str, Any], seq: int, prev_hash: str) -> bytes:
    values = {**values, "seq": seq, "prev_hash": prev_hash}
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return text.encode("ascii")


def entry_of(record: RequestRecord) -> AuditEntry:
    """What a stored record says, read back into an entry for hashing or export."""
    return AuditEntry(**{name: getattr(record, name) for name in FIELD_NAMES})


def record_values(key: bytes, seq: int, prev_hash: str, entry: AuditEntry) -> dict[str, Any]:
    """One row for ``insert(RequestRecord)``: the entry's values, its place and its hash."""
    values = {name: getattr(entry, name) for name in FIELD_NAMES}
    values.update(seq=seq, prev_hash=prev_hash, hash=record_hash(key, prev_hash, seq, entry))
    return values
