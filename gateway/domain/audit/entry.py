"""One audit record before it is chained, and how it travels through the spool.

The proxy builds an :class:`AuditEntry` when a request ends (admin actions and sign-ins
build theirs in ``events``); the writer gives it a place in the chain (seq, prev_hash,
hash) when it reaches the database. Until then it may sit in the spool file as one JSON
line.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# Column widths of request_records; values are cut to fit *before* hashing, so what the
# database stores is exactly what was hashed (Postgres refuses longer values outright).
STRING_LIMITS = {
    "request_id": 100,
    "user_email": 320,
    "department_slug": 100,
    "model": 200,
    "endpoint": 100,
    "client_ip": 64,
    "user_agent": 500,
    "upstream": 300,
    "reason": 200,
    "error": 1000,
    "action": 100,
    "target_type": 50,
    "target_id": 100,
    "client_request_id": 128,
}
INT32_MAX = 2**31 - 1
UUID_FIELDS = ("user_id", "api_key_id", "department_id")
INT_FIELDS = ("status_code", "prompt_tokens", "cached_tokens", "completion_tokens")


@dataclass(slots=True)
class AuditEntry:
    """Every request_records column except seq, prev_hash and hash."""

    created_at: datetime
    request_id: str
    status_code: int
    endpoint: str = ""
    model: str = ""
    user_id: uuid.UUID | None = None
    user_email: str = ""
    api_key_id: uuid.UUID | None = None
    department_id: uuid.UUID | None = None
    department_slug: str = ""
    streamed: bool = False
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: float | None = None
    latency_ms: float = 0.0
    client_ip: str = ""
    user_agent: str = ""
    upstream: str = ""
    reason: str = ""
    error: str = ""
    prompt_body: str | None = None
    response_body: str | None = None
    action: str = "api.request"
    target_type: str = ""
    target_id: str = ""
    details: str | None = None  # JSON text
    client_request_id: str = ""

    def plain(self) -> dict[str, Any]:
        """JSON-ready values: datetimes as UTC ISO 8601, UUIDs as strings."""
        values = {name: getattr(self, name) for name in FIELD_NAMES}
        values["created_at"] = to_utc(self.created_at).isoformat()
        for name in UUID_FIELDS:
            if values[name] is not None:
                values[name] = str(values[name])
        return values

    def to_json(self) -> str:
        return json.dumps(self.plain(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, line: str) -> AuditEntry:
        values = json.loads(line)
        values["created_at"] = datetime.fromisoformat(values["created_at"])
        for name in UUID_FIELDS:
            if values.get(name) is not None:
                values[name] = uuid.UUID(values[name])
        return cls(**values)

    def fitted(self) -> AuditEntry:
        """The entry as the database will hold it: UTC time, strings cut to their columns,
        counts within the integer columns, no NUL characters (Postgres text refuses them)."""
        values = {name: getattr(self, name) for name in FIELD_NAMES}
        values["created_at"] = to_utc(self.created_at)
        for name, limit in STRING_LIMITS.items():
            values[name] = _clean(str(values[name] or ""))[:limit]
        for name in ("prompt_body", "response_body", "details"):
            if values[name] is not None:
                values[name] = _clean(values[name])
        for name in INT_FIELDS:
            values[name] = max(-INT32_MAX, min(INT32_MAX, int(values[name])))
        values["streamed"] = bool(values["streamed"])
        values["latency_ms"] = float(values["latency_ms"])
        if values["ttft_ms"] is not None:
            values["ttft_ms"] = float(values["ttft_ms"])
        return AuditEntry(**values)


FIELD_NAMES = tuple(f.name for f in dataclasses.fields(AuditEntry))
# The columns records had before the chain was keyed (migration 0003): what their plain
# SHA-256 hashes cover.
UNKEYED_FIELD_NAMES = tuple(
    name
    for name in FIELD_NAMES
    if name not in {"action", "target_type", "target_id", "details", "client_request_id"}
)


def to_utc(moment: datetime) -> datetime:
    """Naive datetimes (SQLite hands them back) are taken to be UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _clean(text: str) -> str:
    # Lone surrogates (from JSON such as "\\ud800") cannot be encoded as UTF-8 at all.
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


TRUNCATION_MARK = "\n[truncated by the gateway: {kept} of {total} bytes kept]"


def cap_body(text: str, max_bytes: int) -> str:
    """At most ``max_bytes`` of ``text`` (UTF-8), cut between characters, plus a mark.

    The mark (appended beyond the cap) says how much was kept, so a reader never mistakes a
    cut body for the whole one. Text within the cap comes back unchanged.
    """
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    encoded = text.encode("utf-8", "replace")
    if len(encoded) <= max_bytes:
        return text
    # A cut inside a multi-byte character leaves a partial sequence at the end only;
    # "ignore" drops exactly those bytes.
    kept = encoded[:max_bytes].decode("utf-8", "ignore")
    size = len(kept.encode("utf-8"))
    return kept + TRUNCATION_MARK.format(kept=size, total=len(encoded))
