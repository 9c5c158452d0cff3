from __future__ import annotations

import uuid
from datetime import date

from sqlalchemy import BigInteger, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from gateway.db.base import Base

# The limiter's refusal reasons (gateway.domain.limits.types.REASONS), one counter each; the
# audit record's reason is "rate_limit:" + one of them.
REFUSAL_COLUMNS = {
    "requests_per_minute": "refused_requests_per_minute",
    "tokens_per_minute": "refused_tokens_per_minute",
    "concurrent_requests": "refused_concurrent_requests",
    "tokens_per_day": "refused_tokens_per_day",
    "tokens_per_month": "refused_tokens_per_month",
}
COUNTER_COLUMNS = (
    "requests",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "errors",
    "refusals",
    *REFUSAL_COLUMNS.values(),
)
# What top?by=key|user sums (gateway/domain/usage/query.py).
SUMMED = ("requests", "prompt_tokens", "completion_tokens", "cached_tokens")


class UsageDaily(Base):
    """API requests summed per UTC day, department, user, key and way in (web UI or API).

    Kept by the audit writer in the transaction that inserts the records it sums
    (gateway/domain/usage/rollup.py), so the two never disagree; the console reads these
    rows instead of scanning request_records. ``id`` is derived from the bucket (day, the
    three ids, via), because a unique constraint over nullable columns would not make two
    NULLs conflict, and an upsert needs them to. Who is a snapshot: no foreign keys, so a
    row outlives its user, key or department (and the audit records retention removes).
    """

    __tablename__ = "usage_daily"
    __table_args__ = (
        Index("ix_usage_daily_day_department", "day", "department_id"),
        Index("ix_usage_daily_department_day", "department_id", "day"),
        # top?by=user's second query: each top user's departments in the range.
        Index("ix_usage_daily_user_day", "user_id", "day"),
        # The export's keyset order: its first page stops after one page of rows.
        Index("ix_usage_daily_day_id", "day", "id"),
        # refusals sums only the rows with a refusal (a few percent of them).
        Index(
            "ix_usage_daily_refused_day",
            "day",
            postgresql_where=text("refusals > 0"),
            sqlite_where=text("refusals > 0"),
        ),
        # top?by=key and top?by=user sum a range of days per key or user: on Postgres an
        # index-only scan of these (the sums' columns included) instead of the table's
        # rows, about twice as fast in the console benchmark (migration 0007).
        *(
            Index(
                f"ix_usage_daily_day_{name}_sums",
                "day",
                column,
                postgresql_include=list(SUMMED),
                postgresql_where=text(f"{column} IS NOT NULL"),
                sqlite_where=text(f"{column} IS NOT NULL"),
            )
            for name, column in (("key", "api_key_id"), ("user", "user_id"))
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    day: Mapped[date]
    department_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    user_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    api_key_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    via: Mapped[str] = mapped_column(String(8))  # "ui" (a session) or "api" (a key)
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)  # status >= 500
    refusals: Mapped[int] = mapped_column(BigInteger, default=0)  # refused by a limit (429)
    refused_requests_per_minute: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_tokens_per_minute: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_concurrent_requests: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_tokens_per_day: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_tokens_per_month: Mapped[int] = mapped_column(BigInteger, default=0)


class UsageDailyDepartment(Base):
    """usage_daily summed once more, per UTC day, department and way in (no user, no key).

    The console's ``daily`` and ``refusals`` answers group by exactly these three, so they
    read this table: a row per department and via a day (a few thousand rows for a month),
    where usage_daily holds one per user or key (hundreds of thousands). Kept by the same
    statement batch, in the same transaction, as usage_daily (rollup.py), so it always
    equals usage_daily grouped by (day, department_id, via); a test checks that. ``id`` is
    derived from (day, department, via) for the same reason as usage_daily's: a unique
    constraint would not make two NULL departments conflict.
    """

    __tablename__ = "usage_daily_departments"
    __table_args__ = (
        # daily and refusals read a range of days, sometimes one department's.
        Index("ix_usage_daily_departments_day_department", "day", "department_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    day: Mapped[date]
    department_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    via: Mapped[str] = mapped_column(String(8))
    requests: Mapped[int] = mapped_column(BigInteger, default=0)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)
    refusals: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_requests_per_minute: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_tokens_per_minute: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_concurrent_requests: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_tokens_per_day: Mapped[int] = mapped_column(BigInteger, default=0)
    refused_tokens_per_month: Mapped[int] = mapped_column(BigInteger, default=0)
