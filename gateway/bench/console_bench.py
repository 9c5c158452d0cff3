"""`enclave bench console`: how fast the admin console's API answers on a big appliance.

A fresh Postgres database beside ``--database-url``'s is migrated and seeded in bulk
(console_seed.py: departments, users, keys, audit records and their usage rollups), the
real gateway serves it from its own process (as `enclave serve` does, so its logs stay off
this JSON), and a break-glass admin calls each console API call ``--repeat`` times in turn,
first pages and deep ones (a cursor a few pages in). One caller at a time: this measures
what each query costs, not how many the gateway serves at once. Not a timed test: the
numbers depend on the machine, which the report names.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from gateway.bench.console_calls import Call, calls_for
from gateway.bench.console_seed import Seeded, Sizes, seed
from gateway.bench.fake_upstream import FakeUpstream
from gateway.bench.gateway_bench import _start_gateway
from gateway.bench.report import emit
from gateway.ports import free_port

ADMIN_EMAIL = "bench-admin@example.org"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    default_url = os.environ.get("TEST_DATABASE_URL", "")
    parser.add_argument(
        "--database-url",
        default=default_url,
        help="a Postgres database on the server to use (postgresql+asyncpg://...); a new "
        "database is made beside it (default: $TEST_DATABASE_URL)",
    )
    parser.add_argument(
        "--redis-url", default=os.environ.get("TEST_REDIS_URL", ""), help="default: $TEST_REDIS_URL"
    )
    parser.add_argument("--departments", type=int, default=50)
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--records", type=int, default=1_000_000, help="audit records")
    parser.add_argument("--days", type=int, default=90, help="the records span this many days")
    parser.add_argument("--repeat", type=int, default=50, help="calls of each kind measured")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the data")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--output", type=Path, help="also write the JSON here")


def run(args: argparse.Namespace) -> int:
    if not args.database_url.startswith("postgresql"):
        print("enclave: --database-url (or TEST_DATABASE_URL) must be Postgres", file=sys.stderr)
        return 2
    if min(args.departments, args.users, args.keys, args.records, args.repeat, args.days) < 1:
        print("enclave: sizes, --days and --repeat must be at least 1", file=sys.stderr)
        return 2
    load_before = os.getloadavg()[0]
    report = asyncio.run(_bench(args))
    return emit(report, load_before, args.output)


def _plain(url: str) -> str:
    """asyncpg's form of a SQLAlchemy URL."""
    return url.replace("postgresql+asyncpg://", "postgresql://", 1)


async def _bench(args: argparse.Namespace) -> dict[str, Any]:
    name = f"enclave_console_bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(_plain(args.database_url))
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = args.database_url.rsplit("/", 1)[0] + "/" + name
        try:
            with tempfile.TemporaryDirectory() as data_dir:
                report = await _on_database(args, url, Path(data_dir))
        finally:
            if not args.keep:
                await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        report["setup"]["database_kept"] = name if args.keep else None
        report["machine"]["postgres"] = await admin.fetchval("SHOW server_version")
    finally:
        await admin.close()
    return report


async def _on_database(args: argparse.Namespace, url: str, data_dir: Path) -> dict[str, Any]:
    from gateway import admin_tasks
    from gateway.settings import Settings

    sizes = Sizes(args.departments, args.users, args.keys, args.records, args.days)
    upstream = FakeUpstream(1)
    env = {
        **os.environ,
        "ENCLAVE_DATA_DIR": data_dir.as_posix(),
        "ENCLAVE_DATABASE_URL": url,
        "ENCLAVE_REDIS_URL": args.redis_url,
        "ENCLAVE_WORKERS": f"http://127.0.0.1:{await upstream.start()}",
        "ENCLAVE_WORKER_TOKEN": "bench",
        "ENCLAVE_LOG_LEVEL": "warning",
        "ENCLAVE_LOG_FORMAT": "json",
        "ENCLAVE_PORT": str(free_port()),
    }
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("ENCLAVE_")})
    start = time.perf_counter()
    await asyncio.to_thread(admin_tasks.migrate_database, settings)
    migrated = time.perf_counter() - start
    start = time.perf_counter()
    seeded = await seed(_plain(url), sizes, random.Random(args.seed))
    seeding = time.perf_counter() - start
    password = await admin_tasks.create_admin(settings, ADMIN_EMAIL)
    gateway, port = await asyncio.to_thread(_start_gateway, env)
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120) as client:
            response = await client.post(
                "/auth/local/login", json={"email": ADMIN_EMAIL, "password": password}
            )
            response.raise_for_status()
            results = [
                await _measure(client, call, args.repeat)
                for call in calls_for(seeded, sizes.users, sizes.keys)
            ]
    finally:
        gateway.terminate()
        await asyncio.to_thread(gateway.wait, 30)
        await upstream.close()
    return _report(args, sizes, seeded, migrated, seeding, results)


@dataclass
class Measured:
    call: Call
    latencies_ms: list[float]
    statuses: dict[str, int]
    bytes: int
    page: int = 1
    skipped: str = ""


async def _measure(client: httpx.AsyncClient, call: Call, repeat: int) -> Measured:
    """``call`` once to warm up (and to find a deep page's cursor), then ``repeat`` times."""
    try:
        params, page = await call.prepare(client)
    except LookupError as exc:  # e.g. a list too short to have a deep page
        return Measured(call, [], {}, 0, skipped=str(exc))
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    size = 0
    for i in range(repeat + 1):
        start = time.perf_counter()
        status, size = await call.fetch(client, params)
        elapsed = (time.perf_counter() - start) * 1000
        if i:  # the first one warmed up
            latencies.append(elapsed)
            statuses[str(status)] = statuses.get(str(status), 0) + 1
    return Measured(call, latencies, statuses, size, page)


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest rank: the smallest value at least ``fraction`` of them do not exceed."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _stats(measured: Measured) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": measured.call.name, "request": measured.call.describe()}
    if measured.skipped:
        return {**entry, "skipped": measured.skipped}
    if measured.call.deep:
        entry["page"] = measured.page
    ms = measured.latencies_ms
    return {
        **entry,
        "statuses": measured.statuses,
        "latency_ms_p50": round(statistics.median(ms), 2),
        "latency_ms_p95": round(_percentile(ms, 0.95), 2),
        "latency_ms_max": round(max(ms), 2),
        "response_bytes": measured.bytes,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _report(
    args: argparse.Namespace,
    sizes: Sizes,
    seeded: Seeded,
    migrated: float,
    seeding: float,
    results: list[Measured],
) -> dict[str, Any]:
    return {
        "benchmark": "console",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "machine": {
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "setup": {
            "departments": sizes.departments,
            "users": sizes.users,
            "api_keys": sizes.keys,
            "group_mappings": sizes.departments * 2,
            "audit_records": sizes.records,
            "usage_daily_rows": seeded.rollup_rows,
            "usage_daily_departments_rows": seeded.department_rollup_rows,
            "days_of_records": sizes.days,
            "repeat": args.repeat,
            "limiter": "redis" if args.redis_url else "in-process",
            "callers": "one at a time, over loopback HTTP, signed in as a break-glass admin",
            "audit_chain": "prev_hash/hash are random filler: the chain is not verified here",
            "after_seeding": "VACUUM (ANALYZE), as autovacuum would have on a running appliance",
        },
        "seconds": {
            "migrate": round(migrated, 2),
            "seed_total": round(seeding, 2),
            **{k: round(v, 2) for k, v in seeded.seconds.items()},
        },
        "calls": [_stats(m) for m in results],
        "target": "p95 under 100 ms for every call",
    }
