"""Reading the rollups and summing the audit records the same way, to compare them."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from gateway.db.models.usage import COUNTER_COLUMNS, REFUSAL_COLUMNS
from tests.gateway.audit.support import sql

# Every counter as a SQL sum over usage_daily, and the bucket it belongs to.
_KEY = "day, department_id, user_id, api_key_id, via"


async def rollups(url: str) -> dict[tuple[Any, ...], dict[str, int]]:
    """usage_daily as {(day, department, user, key, via): counters}, ids and days as text."""
    columns = ", ".join(COUNTER_COLUMNS)
    rows = await sql(url, f"SELECT {_KEY}, {columns} FROM usage_daily")
    return {
        _key(row[:5]): dict(zip(COUNTER_COLUMNS, map(int, row[5:]), strict=True)) for row in rows
    }


async def department_rollups(url: str) -> dict[tuple[Any, ...], dict[str, int]]:
    """usage_daily_departments as {(day, department, via): counters}."""
    columns = ", ".join(COUNTER_COLUMNS)
    rows = await sql(url, f"SELECT day, department_id, via, {columns} FROM usage_daily_departments")
    return {
        _coarse_key(row[:3]): dict(zip(COUNTER_COLUMNS, map(int, row[3:]), strict=True))
        for row in rows
    }


def grouped(fine: dict[tuple[Any, ...], dict[str, int]]) -> dict[tuple[Any, ...], dict[str, int]]:
    """usage_daily's buckets (as rollups() reads them) summed per (day, department, via):
    what usage_daily_departments must hold."""
    sums: dict[tuple[Any, ...], Counter[str]] = {}
    for (day, department, _user, _key, via), counts in fine.items():
        sums.setdefault((day, department, via), Counter(dict.fromkeys(COUNTER_COLUMNS, 0))).update(
            counts
        )
    return {key: dict(counts) for key, counts in sums.items()}


async def from_records(url: str) -> dict[tuple[Any, ...], dict[str, int]]:
    """The same sums, straight from request_records (API requests only)."""
    rows = await sql(
        url,
        "SELECT created_at, department_id, user_id, api_key_id, details, status_code, reason, "
        "prompt_tokens, completion_tokens, cached_tokens FROM request_records "
        "WHERE action = 'api.request'",
    )
    return sum_records([dict(zip(_RECORD_COLUMNS, row, strict=True)) for row in rows])


_RECORD_COLUMNS = (
    "created_at",
    "department_id",
    "user_id",
    "api_key_id",
    "details",
    "status_code",
    "reason",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
)


def sum_records(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, int]]:
    """Records (as read back from request_records) summed per bucket, independently of the
    gateway's own code."""
    sums: dict[tuple[Any, ...], Counter[str]] = {}
    for r in records:
        via = "ui" if r["details"] and json.loads(r["details"]).get("via") == "ui" else "api"
        day = str(r["created_at"])[:10]
        key = _key((day, r["department_id"], r["user_id"], r["api_key_id"], via))
        counts = sums.setdefault(key, Counter(dict.fromkeys(COUNTER_COLUMNS, 0)))
        counts["requests"] += 1
        counts["prompt_tokens"] += r["prompt_tokens"]
        counts["completion_tokens"] += r["completion_tokens"]
        counts["cached_tokens"] += r["cached_tokens"]
        counts["errors"] += r["status_code"] >= 500
        if r["reason"].startswith("rate_limit:") and r["status_code"] == 429:
            counts["refusals"] += 1
            counts[REFUSAL_COLUMNS[r["reason"].split(":", 1)[1]]] += 1
    return {key: dict(counts) for key, counts in sums.items()}


def _coarse_key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    day, department, via = values
    return (str(day)[:10], str(department).replace("-", "") if department else None, via)


def _key(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """Days and ids as text without dashes: SQLite keeps UUIDs as 32 hex digits."""
    day, *ids, via = values
    return (str(day)[:10], *(str(v).replace("-", "") if v else None for v in ids), via)
