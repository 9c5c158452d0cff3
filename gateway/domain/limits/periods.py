"""UTC days and months as integers, the way the Lua script numbers them.

Quota counters are keyed by period: day = days since the epoch, month = year * 12 + month - 1.
Both limiters and the settlement of a Redis reservation must agree on these numbers.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

US_PER_S = 1_000_000
US_PER_DAY = 86_400 * US_PER_S


def day_of(now_us: int) -> int:
    return now_us // US_PER_DAY


def month_of(now_us: int) -> int:
    moment = _utc(now_us)
    return moment.year * 12 + moment.month - 1


def seconds_to_next_day(now_us: int) -> float:
    return ((day_of(now_us) + 1) * US_PER_DAY - now_us) / US_PER_S


def seconds_to_next_month(now_us: int) -> float:
    return (next_month_start(now_us) - _utc(now_us)) / timedelta(seconds=1)


def next_day_start(now_us: int) -> datetime:
    """UTC midnight after ``now_us``: when the day's counters start again."""
    return _utc((day_of(now_us) + 1) * US_PER_DAY)


def next_month_start(now_us: int) -> datetime:
    moment = _utc(now_us)
    year, month = divmod(moment.year * 12 + moment.month, 12)  # the next month, 0-based
    return datetime(year, month + 1, 1, tzinfo=UTC)


def _utc(now_us: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=now_us)
