"""Summing a batch of audit entries into the usage rollups, in the batch's transaction.

The audit writer calls :func:`add_to_rollups` from ``store.append_locked``, after it has
inserted the batch's records and before it commits: the rollups move in the same
transaction as the records they count, so they can never count a record that was not
written, nor miss one that was. A spool replay inserts (and so counts) only the records the
table does not hold yet, so a replayed record is counted exactly once too.

A batch is summed in memory first (a batch of 256 chat requests is usually a handful of
buckets), then each bucket is one ``INSERT ... ON CONFLICT (id) DO UPDATE SET n = n +
excluded.n``. The same sums, added up once more per (day, department, via), go to
usage_daily_departments the same way, in the same transaction: the coarse table always
equals usage_daily grouped by those three. Writers take the chain row's lock before they
get here, so upserts from several gateways never interleave.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, TypeVar

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models.usage import (
    COUNTER_COLUMNS,
    REFUSAL_COLUMNS,
    UsageDaily,
    UsageDailyDepartment,
)
from gateway.domain.audit.entry import AuditEntry, to_utc

API_REQUEST = "api.request"
RATE_LIMIT_PREFIX = "rate_limit:"
# Fixed forever: the rows' ids are derived from it (and migration 0005 repeats it).
K = TypeVar("K")  # a rollup's key: a Bucket, or (day, department, via)
BUCKET_NAMESPACE = uuid.UUID("5d0c6f0e-3b1a-4e53-9a53-0e6c1d7a2b10")
# usage_daily_departments' ids, likewise fixed (migration 0007 repeats it); a different
# namespace, so that a coarse row's id is never a fine row's.
DEPARTMENT_NAMESPACE = uuid.UUID("0b7d3c52-8f0e-4d8e-b1f4-6f2a9c4e7d31")


@dataclass(frozen=True, slots=True)
class Bucket:
    day: date
    department_id: uuid.UUID | None
    user_id: uuid.UUID | None
    api_key_id: uuid.UUID | None
    via: str

    @property
    def id(self) -> uuid.UUID:
        return bucket_id(self.day, self.department_id, self.user_id, self.api_key_id, self.via)


def bucket_id(
    day: date,
    department_id: uuid.UUID | None,
    user_id: uuid.UUID | None,
    api_key_id: uuid.UUID | None,
    via: str,
) -> uuid.UUID:
    """The row id of a bucket: the same bucket always gets the same id, in any process."""
    parts = [day.isoformat(), *(str(v) if v else "" for v in (department_id, user_id, api_key_id))]
    return uuid.uuid5(BUCKET_NAMESPACE, "|".join([*parts, via]))


def department_bucket_id(day: date, department_id: uuid.UUID | None, via: str) -> uuid.UUID:
    """The row id of a usage_daily_departments bucket, derived as bucket_id's is."""
    parts = [day.isoformat(), str(department_id) if department_id else "", via]
    return uuid.uuid5(DEPARTMENT_NAMESPACE, "|".join(parts))


def by_department(
    buckets: dict[Bucket, dict[str, int]],
) -> dict[tuple[date, uuid.UUID | None, str], dict[str, int]]:
    """The fine buckets' counters added up per (day, department, via)."""
    coarse: dict[tuple[date, uuid.UUID | None, str], dict[str, int]] = {}
    for bucket, counts in buckets.items():
        accumulate(coarse, (bucket.day, bucket.department_id, bucket.via), counts)
    return coarse


def accumulate(totals: dict[K, dict[str, int]], key: K, counts: dict[str, int]) -> None:
    """Add ``counts`` to ``totals[key]`` (a copy of them when the key is new)."""
    total = totals.get(key)
    if total is None:
        totals[key] = dict(counts)
    else:
        for name, value in counts.items():
            total[name] += value


def via_of(entry: AuditEntry) -> str:
    """ "ui" when the web app sent it (with a session; accounting.py marks it), else "api"."""
    if not entry.details:
        return "api"
    try:
        details = json.loads(entry.details)
    except ValueError:
        return "api"
    return "ui" if isinstance(details, dict) and details.get("via") == "ui" else "api"


def counters_of(entry: AuditEntry) -> dict[str, int]:
    """What one API request adds to its bucket."""
    return request_counters(
        entry.status_code,
        entry.reason,
        entry.prompt_tokens,
        entry.completion_tokens,
        entry.cached_tokens,
    )


def request_counters(
    status_code: int, reason: str, prompt: int, completion: int, cached: int
) -> dict[str, int]:
    """What a request with this outcome adds to its bucket (the console benchmark's seeding
    counts its generated records with this too)."""
    counts = dict.fromkeys(COUNTER_COLUMNS, 0)
    counts["requests"] = 1
    counts["prompt_tokens"] = max(0, prompt)
    counts["completion_tokens"] = max(0, completion)
    counts["cached_tokens"] = max(0, cached)
    if status_code >= 500:
        counts["errors"] = 1
    if reason.startswith(RATE_LIMIT_PREFIX) and 400 <= status_code < 500:
        counts["refusals"] = 1
        column = REFUSAL_COLUMNS.get(reason.removeprefix(RATE_LIMIT_PREFIX))
        if column:
            counts[column] = 1
    return counts


def summed(entries: Sequence[AuditEntry]) -> dict[Bucket, dict[str, int]]:
    """The batch's API requests, summed per bucket (admin actions and sign-ins left out)."""
    buckets: dict[Bucket, dict[str, int]] = {}
    for entry in entries:
        if entry.action != API_REQUEST:
            continue
        entry = entry.fitted()  # the values as the record holds them
        bucket = Bucket(
            to_utc(entry.created_at).date(),
            entry.department_id,
            entry.user_id,
            entry.api_key_id,
            via_of(entry),
        )
        accumulate(buckets, bucket, counters_of(entry))
    return buckets


async def add_to_rollups(session: AsyncSession, entries: Sequence[AuditEntry]) -> int:
    """Add ``entries`` (as inserted, in the caller's transaction) to their buckets, in
    usage_daily and usage_daily_departments; returns how many usage_daily buckets moved."""
    buckets = summed(entries)
    if not buckets:
        return 0
    rows: list[dict[str, Any]] = [
        {
            "id": bucket.id,
            "day": bucket.day,
            "department_id": bucket.department_id,
            "user_id": bucket.user_id,
            "api_key_id": bucket.api_key_id,
            "via": bucket.via,
            **counts,
        }
        for bucket, counts in buckets.items()
    ]
    coarse: list[dict[str, Any]] = [
        {
            "id": department_bucket_id(day, department_id, via),
            "day": day,
            "department_id": department_id,
            "via": via,
            **counts,
        }
        for (day, department_id, via), counts in by_department(buckets).items()
    ]
    await _upsert(session, UsageDaily, rows)
    await _upsert(session, UsageDailyDepartment, coarse)
    return len(rows)


async def _upsert(
    session: AsyncSession,
    model: type[UsageDaily] | type[UsageDailyDepartment],
    rows: list[dict[str, Any]],
) -> None:
    """One ``INSERT ... ON CONFLICT (id) DO UPDATE`` adding ``rows``' counters, in id order
    (the same order in every writer)."""
    rows.sort(key=lambda row: str(row["id"]))
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = insert(model)
    table = model.__table__
    statement = statement.on_conflict_do_update(
        index_elements=[table.c.id],
        set_={name: table.c[name] + statement.excluded[name] for name in COUNTER_COLUMNS},
    )
    await session.execute(statement, rows)
