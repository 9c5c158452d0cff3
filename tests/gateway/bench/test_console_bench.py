"""`enclave bench console`, run tiny against the test Postgres: the report's shape, and
every console call answered 200. No timing is asserted: that is what the full run is for.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg

from gateway.cli import main


async def _bench_databases(database_url: str) -> set[str]:
    connection = await asyncpg.connect(database_url.replace("+asyncpg", "", 1))
    try:
        rows = await connection.fetch(
            "SELECT datname FROM pg_database WHERE datname LIKE 'enclave_console_bench_%'"
        )
    finally:
        await connection.close()
    return {str(row["datname"]) for row in rows}


def test_a_tiny_run_answers_every_call_and_drops_its_database(
    tmp_path: Path, database_url: str
) -> None:
    # `database_url` is the suite's Postgres (tests/conftest.py fails the test without it).
    before = asyncio.run(_bench_databases(database_url))
    output = tmp_path / "console.json"
    sizes = ["--users", "200", "--keys", "500", "--records", "2000", "--repeat", "2"]
    where = ["--database-url", database_url, "--output", str(output)]
    assert main(["bench", "console", *sizes, *where]) == 0
    report = json.loads(output.read_text())

    assert report["benchmark"] == "console"
    assert {"cpu", "cpus", "postgres", "load_average_1m"} <= set(report["machine"])
    setup = report["setup"]
    assert (setup["users"], setup["api_keys"], setup["audit_records"]) == (200, 500, 2000)
    assert setup["usage_daily_rows"] > 0
    assert 0 < setup["usage_daily_departments_rows"] <= setup["usage_daily_rows"]
    assert report["seconds"]["seed_total"] > 0
    measured = [c for c in report["calls"] if "skipped" not in c]
    names = {c["name"] for c in measured}
    expected = {
        "departments", "users_q_rare", "keys_department", "audit_status_429", "audit_record",
        "audit_export_csv_first_64kb", "usage_daily_30_days", "usage_top_keys", "usage_refusals",
        "workers", "audit_deep", "keys_deep",
    }  # fmt: skip
    assert expected <= names
    for call in measured:
        assert call["statuses"] == {"200": 2}, call
        assert call["latency_ms_p50"] <= call["latency_ms_p95"] <= call["latency_ms_max"]
        assert call["response_bytes"] > 0
    # Only a list with one page has no deep page.
    assert all(c["name"].endswith("_deep") for c in report["calls"] if "skipped" in c)
    assert asyncio.run(_bench_databases(database_url)) == before


def test_a_database_other_than_postgres_is_refused() -> None:
    assert main(["bench", "console", "--database-url", "sqlite+aiosqlite:///x.db"]) == 2
