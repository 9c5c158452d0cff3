from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base


class RequestRecord(Base):
    """One API request through the gateway, whatever its outcome: the audit log.

    Records are hash-chained in ``seq`` order: ``hash`` (an HMAC keyed from the gateway's
    secret) covers every other column and the previous record's hash (``prev_hash``), so a
    changed or removed row breaks the chain (``enclave audit verify``). Who asked is a
    snapshot, hence no foreign keys. Admin actions and sign-ins are records here too
    (``action`` other than "api.request"), so one chain covers everything audited.
    """

    __tablename__ = "request_records"
    __table_args__ = (
        Index("ix_request_records_department_created", "department_id", "created_at"),
        Index("ix_request_records_user_created", "user_id", "created_at"),
        Index("ix_request_records_key_created", "api_key_id", "created_at"),
        Index("ix_request_records_action_created", "action", "created_at"),
    )

    # Assigned by the audit writer under the chain lock, not by the database.
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    created_at: Mapped[datetime] = mapped_column(index=True)
    request_id: Mapped[str] = mapped_column(String(100), index=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    user_email: Mapped[str] = mapped_column(String(320), default="")
    api_key_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    department_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    department_slug: Mapped[str] = mapped_column(String(100), default="")
    model: Mapped[str] = mapped_column(String(200), default="")
    endpoint: Mapped[str] = mapped_column(String(100), default="")
    status_code: Mapped[int] = mapped_column(index=True)
    streamed: Mapped[bool] = mapped_column(default=False)
    prompt_tokens: Mapped[int] = mapped_column(default=0)
    cached_tokens: Mapped[int] = mapped_column(default=0)
    completion_tokens: Mapped[int] = mapped_column(default=0)
    ttft_ms: Mapped[float | None] = mapped_column(default=None)
    latency_ms: Mapped[float] = mapped_column(default=0.0)
    client_ip: Mapped[str] = mapped_column(String(64), default="")
    user_agent: Mapped[str] = mapped_column(String(500), default="")
    upstream: Mapped[str] = mapped_column(String(300), default="")
    # Why the gateway refused or failed it ("rate_limit:requests_per_minute", "upstream_error"...).
    reason: Mapped[str] = mapped_column(String(200), default="")
    error: Mapped[str] = mapped_column(String(1000), default="")
    # Only when the department turned bodies on; capped at ENCLAVE_AUDIT_BODY_MAX_BYTES.
    prompt_body: Mapped[str | None] = mapped_column(Text, default=None)
    response_body: Mapped[str | None] = mapped_column(Text, default=None)
    # What the record is: "api.request" for traffic, dotted admin and sign-in actions
    # ("key.revoke", "auth.login_failed") with what they touched and what changed.
    action: Mapped[str] = mapped_column(String(100), default="api.request")
    target_type: Mapped[str] = mapped_column(String(50), default="")
    target_id: Mapped[str] = mapped_column(String(100), default="")
    # JSON text ({"before": ..., "after": ...}); never secrets, key hashes or passwords.
    details: Mapped[str | None] = mapped_column(Text, default=None)
    # The caller's own X-Request-Id, kept apart: request_id is always the gateway's.
    client_request_id: Mapped[str] = mapped_column(String(128), default="")
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64), unique=True)


class AuditChain(Base):
    """The chain's one row: its head (last written record) and its anchor.

    Retention deletes the oldest records; the anchor keeps the seq and hash of the last
    deleted one, so verification starts there instead of at the genesis hash.
    """

    __tablename__ = "audit_chain"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    head_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    head_hash: Mapped[str] = mapped_column(String(64))
    anchor_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    anchor_hash: Mapped[str] = mapped_column(String(64))
    # Records from this seq on are HMAC-keyed; earlier ones (written before keying existed)
    # are plain SHA-256. Set once by the migration that introduced keying.
    keyed_from_seq: Mapped[int] = mapped_column(BigInteger, default=1)
