"""The rollups move with the audit records, in the same transaction: every API request
counted once, whether written at once or replayed from the spool (twice, even)."""

from __future__ import annotations

import asyncio
import csv
import io
import shutil
import socket
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from gateway.db import migrate
from gateway.db.models.usage import REFUSAL_COLUMNS
from gateway.domain.audit.actions import Actor, action_entry
from gateway.domain.audit.entry import AuditEntry
from gateway.domain.limits.types import REASONS
from gateway.domain.usage import export
from gateway.domain.usage.query import UsageFilter
from gateway.domain.usage.rollup import bucket_id, department_bucket_id, summed
from tests.gateway.audit.support import T0, entry, running_writer, sessions, sql
from tests.gateway.usage.support import department_rollups, from_records, grouped, rollups

DEPARTMENTS = [uuid.UUID(int=100 + i) for i in range(2)]
KEYS = [uuid.UUID(int=200 + i) for i in range(3)]
VIA_UI = '{"via":"ui"}'


def traffic(count: int, tag: str = "t") -> list[AuditEntry]:
    """API requests of every kind (UI and key, across midnight, refused by each limit,
    failed), with an admin action and a sign-in among them, which must not count."""
    entries = []
    for n in range(count):
        ui = n % 3 == 0
        e = entry(
            n,
            tag,
            created_at=T0 + timedelta(hours=(n % 5) * 4),  # 09:00 .. 01:00 the next day
            department_id=DEPARTMENTS[n % 2],
            api_key_id=None if ui else KEYS[n % 3],
            details=VIA_UI if ui else None,
            cached_tokens=n // 2,
        )
        if n % 7 == 1:
            reason = REASONS[n % len(REASONS)]
            e.status_code, e.reason = 429, f"rate_limit:{reason}"
            e.prompt_tokens = e.completion_tokens = e.cached_tokens = 0
        elif n % 11 == 2:
            e.status_code, e.reason = 502, "upstream_error"
        elif n % 13 == 3:
            e.status_code, e.reason = 400, "bad_request"  # a 4xx, but no limit's refusal
        entries.append(e)
        if n % 17 == 0:
            actor = Actor(email="root@example.test", department_id=DEPARTMENTS[0])
            entries.append(action_entry(actor, "key.revoke", "api_key", KEYS[0]))
    return entries


def test_a_batch_is_summed_per_bucket_and_only_api_requests_count() -> None:
    entries = traffic(40)
    buckets = summed(entries)
    api = [e for e in entries if e.action == "api.request"]
    assert sum(c["requests"] for c in buckets.values()) == len(api) == 40
    assert sum(c["prompt_tokens"] for c in buckets.values()) == sum(e.prompt_tokens for e in api)
    refused = [e for e in api if e.status_code == 429]
    assert sum(c["refusals"] for c in buckets.values()) == len(refused)
    for reason, column in REFUSAL_COLUMNS.items():
        want = sum(e.reason == f"rate_limit:{reason}" for e in api)
        assert sum(c[column] for c in buckets.values()) == want, reason
    assert sum(c["errors"] for c in buckets.values()) == sum(e.status_code >= 500 for e in api)
    assert {b.via for b in buckets} == {"ui", "api"}
    assert len({b.day for b in buckets}) == 2  # past midnight UTC: the next day's bucket
    # The limiter's reasons and the table's columns are the same five.
    assert tuple(REFUSAL_COLUMNS) == REASONS


def test_a_buckets_id_is_its_key_and_the_migration_derives_it_alike() -> None:
    day = T0.date()
    first = bucket_id(day, DEPARTMENTS[0], None, KEYS[0], "api")
    assert first == bucket_id(day, DEPARTMENTS[0], None, KEYS[0], "api")
    assert first != bucket_id(day, DEPARTMENTS[0], KEYS[0], None, "api")  # not just the set
    assert first != bucket_id(day, DEPARTMENTS[0], None, KEYS[0], "ui")
    from importlib import import_module

    revision = import_module("migrations.versions.2026_12_03_0005_usage_daily")
    values = {
        "day": day,
        "department_id": DEPARTMENTS[0],
        "user_id": None,
        "api_key_id": KEYS[0],
        "via": "api",
    }
    assert revision._bucket_id(values) == first
    coarse = import_module("migrations.versions.2026_12_03_0007_usage_daily_departments")
    assert coarse._bucket_id(values) == department_bucket_id(day, DEPARTMENTS[0], "api")
    assert department_bucket_id(day, None, "api") != department_bucket_id(day, None, "ui")
    assert department_bucket_id(day, None, "api") != bucket_id(day, None, None, None, "api")


async def assert_exact(url: str) -> dict[tuple[object, ...], dict[str, int]]:
    """usage_daily equals the records summed, and usage_daily_departments equals
    usage_daily grouped by (day, department, via); returns usage_daily's buckets."""
    fine = await rollups(url)
    assert fine == await from_records(url)
    assert await department_rollups(url) == grouped(fine)
    return fine


async def test_rollups_add_up_to_the_records_written(any_url: str, tmp_path: Path) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for e in traffic(120):
            writer.submit(e)
        await writer.flush()
    expected = await assert_exact(any_url)
    assert sum(c["requests"] for c in expected.values()) == 120
    assert len(await department_rollups(any_url)) < len(expected)  # coarser, indeed
    assert sum(c["refusals"] for c in expected.values()) > 0


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _unreachable(url: str, tmp_path: Path) -> str:
    if url.startswith("sqlite"):
        return "sqlite+aiosqlite:///" + str(tmp_path / "missing" / "no.db")
    return make_url(url).set(port=_closed_port()).render_as_string(hide_password=False)


async def _until_replayed(url: str, spool: Path) -> None:
    async with running_writer(url, spool) as writer:  # start() replays the spool
        for _ in range(500):
            if writer.spooled == 0:
                return
            await asyncio.sleep(0.02)
        raise AssertionError("the spool was not replayed")


async def test_a_spool_replayed_twice_is_counted_once(any_url: str, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    async with running_writer(_unreachable(any_url, tmp_path), spool) as down:
        for e in traffic(60, "s"):
            down.submit(e)
        await down.flush()
        assert down.spooled == len(traffic(60, "s"))
    [left] = list(spool.glob("*.jsonl"))
    kept = tmp_path / "copy.jsonl"
    shutil.copyfile(left, kept)

    await _until_replayed(any_url, spool)
    once = await assert_exact(any_url)
    assert sum(c["requests"] for c in once.values()) == 60

    # A crash after the replay committed, before the file was removed: the same file again,
    # with ten requests more. Only those ten are new, to the records and to the rollups.
    with kept.open("a", encoding="utf-8") as handle:
        handle.writelines(e.to_json() + "\n" for e in traffic(10, "late"))
    shutil.copyfile(kept, left)
    await _until_replayed(any_url, spool)
    twice = await assert_exact(any_url)
    assert sum(c["requests"] for c in twice.values()) == 70


async def test_the_migration_sums_the_records_already_there(any_url: str, tmp_path: Path) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for e in traffic(50):
            writer.submit(e)
        await writer.flush()
    kept = await rollups(any_url)
    coarse = await department_rollups(any_url)
    # Back to before usage_daily, and up again: the upgrade's backfill finds the same sums.
    await asyncio.to_thread(migrate.downgrade, any_url, "0004")
    count = "SELECT count(*) FROM request_records WHERE action = 'api.request'"
    assert await sql(any_url, count) == [(50,)]  # the records stay; only the rollups went
    await asyncio.to_thread(migrate.upgrade, any_url)
    assert await rollups(any_url) == kept
    # and the writer adds to the rows the backfill made (the same ids), not beside them
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for e in traffic(50, "more"):
            writer.submit(e)
        await writer.flush()
    again = await rollups(any_url)
    assert set(again) == set(kept)
    assert again == await assert_exact(any_url)
    assert set(await department_rollups(any_url)) == set(coarse)


async def test_the_department_migration_groups_usage_daily(any_url: str, tmp_path: Path) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for e in traffic(80):
            writer.submit(e)
        await writer.flush()
    kept = await department_rollups(any_url)
    assert kept
    # Back to before usage_daily_departments, and up again: the backfill groups usage_daily.
    await asyncio.to_thread(migrate.downgrade, any_url, "0006")
    await asyncio.to_thread(migrate.upgrade, any_url)
    assert await department_rollups(any_url) == kept
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for e in traffic(30, "more"):
            writer.submit(e)
        await writer.flush()
    # the writer adds to the backfilled rows (the same ids), not beside them
    assert set(await department_rollups(any_url)) == set(kept)
    await assert_exact(any_url)


async def test_the_export_reads_every_row_across_pages(
    any_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for e in traffic(120):
            writer.submit(e)
        await writer.flush()
    monkeypatch.setattr(export, "EXPORT_PAGE_SIZE", 4)
    wide = UsageFilter(T0.date() - timedelta(days=1), T0.date() + timedelta(days=2))
    async with sessions(any_url) as db:
        text = "".join([chunk async for chunk in export.csv_rows(db, wide)])
        only = UsageFilter(wide.since, wide.until, DEPARTMENTS[1])
        one = "".join([chunk async for chunk in export.csv_rows(db, only)])
    rows = list(csv.DictReader(io.StringIO(text)))
    stored = await rollups(any_url)
    assert len(rows) == len(stored) > 8  # several pages
    assert sum(int(r["requests"]) for r in rows) == 120
    assert [r["day"] for r in rows] == sorted(r["day"] for r in rows)
    assert len(
        {(r["day"], r["user_id"], r["api_key_id"], r["via"], r["department_id"]) for r in rows}
    ) == len(rows)
    departments = {r["department_id"] for r in csv.DictReader(io.StringIO(one))}
    assert departments == {str(DEPARTMENTS[1])}
