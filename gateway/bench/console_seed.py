"""Seeding a console benchmark's database: departments, users, keys, then the audit
records and their rollups (``console_records``).

Bulk COPY through asyncpg, not the ORM: a million audit records through SQLAlchemy would
take longer than the benchmark. The data is shaped like a busy appliance: most traffic
through API keys, some through the web UI, use skewed towards a few busy keys and users,
refusals (429) and errors mixed in, and a sprinkle of admin actions and sign-ins, spread
evenly over the last ``days`` days.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg

from gateway.bench.console_records import (
    Department,
    Person,
    write_department_rollups,
    write_records,
    write_rollups,
)
from gateway.domain.keys.tokens import KEY_PREFIX

FIRST_NAMES = ("anna", "ben", "chen", "dara", "emil", "fatima", "gabor", "hana", "ivan", "julia")
LAST_NAMES = ("smith", "meier", "nowak", "rossi", "garcia", "kim", "okafor", "larsen", "silva")
SERVICES = ("ingest", "search", "summarizer", "ticketing", "crm", "notebook", "reporting", "ci")


@dataclass(frozen=True, slots=True)
class Sizes:
    departments: int
    users: int
    keys: int
    records: int
    days: int = 90


@dataclass(slots=True)
class Seeded:
    """What the calls need to know about the data, and how long each step took."""

    department_ids: list[uuid.UUID] = field(default_factory=list)
    busiest_department: uuid.UUID | None = None
    first_seq: int = 0
    last_seq: int = 0
    rollup_rows: int = 0
    department_rollup_rows: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


async def seed(url: str, sizes: Sizes, rng: random.Random) -> Seeded:
    """Fill the migrated, empty database at ``url`` (a plain postgresql:// URL)."""
    seeded = Seeded()
    connection = await asyncpg.connect(url)
    try:
        await connection.execute("SET maintenance_work_mem = '256MB'")
        now = datetime.now(UTC).replace(microsecond=0)
        start = time.perf_counter()
        departments = await _departments(connection, sizes, now)
        seeded.department_ids = [d[0] for d in departments]
        users = await _users(connection, sizes, departments, now, rng)
        keys = await _keys(connection, sizes, departments, now, rng)
        await _group_mappings(connection, departments)
        seeded.seconds["departments_users_keys"] = time.perf_counter() - start
        start = time.perf_counter()
        written = await write_records(connection, sizes.records, sizes.days, users, keys, now, rng)
        seeded.first_seq, seeded.last_seq = written.first_seq, written.last_seq
        seeded.busiest_department = written.busiest_department
        seeded.seconds["audit_records"] = time.perf_counter() - start
        start = time.perf_counter()
        seeded.rollup_rows = await write_rollups(connection, written.rollups)
        seeded.seconds["usage_daily"] = time.perf_counter() - start
        start = time.perf_counter()
        seeded.department_rollup_rows = await write_department_rollups(connection, written.rollups)
        seeded.seconds["usage_daily_departments"] = time.perf_counter() - start
        start = time.perf_counter()
        # What autovacuum would have done on a running appliance: statistics for the
        # planner, and a visibility map so index-only scans need not visit the heap.
        await connection.execute("VACUUM (ANALYZE)")
        seeded.seconds["vacuum_analyze"] = time.perf_counter() - start
    finally:
        await connection.close()
    return seeded


async def _departments(
    connection: asyncpg.Connection, sizes: Sizes, now: datetime
) -> list[Department]:
    rows = []
    for i in range(sizes.departments):
        created = now - timedelta(days=sizes.days + 30)
        rows.append(
            (uuid.uuid4(), f"Department {i:03d}", f"dept-{i:03d}", False, 1, created, created)
        )
    columns = ("id", "name", "slug", "audit_bodies", "scheduling_weight", "created_at")
    await connection.copy_records_to_table(
        "departments", records=rows, columns=(*columns, "updated_at")
    )
    return [(row[0], row[2]) for row in rows]


async def _users(
    connection: asyncpg.Connection,
    sizes: Sizes,
    departments: list[Department],
    now: datetime,
    rng: random.Random,
) -> list[Person]:
    rows, people = [], []
    for i in range(sizes.users):
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        email = f"{first}.{last}{i}@example.org"
        department = rng.choice(departments)
        user_id = uuid.uuid4()
        created = now - timedelta(seconds=rng.randrange(sizes.days * 86400))
        rows.append(
            (
                user_id, f"https://idp.example.org|{uuid.uuid4()}", email,
                f"{first.title()} {last.title()}", department[0], "member", True, created, created,
            )
        )  # fmt: skip
        people.append((user_id, email, department[0], department[1]))
    columns = ("id", "subject", "email", "name", "department_id", "role", "is_active")
    await connection.copy_records_to_table(
        "users", records=rows, columns=(*columns, "created_at", "last_login_at")
    )
    return people


async def _keys(
    connection: asyncpg.Connection,
    sizes: Sizes,
    departments: list[Department],
    now: datetime,
    rng: random.Random,
) -> list[tuple[uuid.UUID, Department]]:
    rows, keys = [], []
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
    for i in range(sizes.keys):
        department = rng.choice(departments)
        key_id = uuid.uuid4()
        shown = KEY_PREFIX + "".join(rng.choice(alphabet) for _ in range(6))
        digest = f"{rng.getrandbits(256):064x}"  # the right form; no key hashes to it
        created = now - timedelta(seconds=rng.randrange((sizes.days + 30) * 86400))
        revoked = created + timedelta(days=rng.randrange(1, 30)) if rng.random() < 0.1 else None
        rows.append(
            (
                key_id, department[0], f"{rng.choice(SERVICES)}-{i}", digest, shown, created,
                revoked, None,
            )
        )  # fmt: skip
        keys.append((key_id, department))
    columns = ("id", "department_id", "name", "key_hash", "display_prefix", "created_at")
    await connection.copy_records_to_table(
        "api_keys", records=rows, columns=(*columns, "revoked_at", "last_used_at")
    )
    return keys


async def _group_mappings(connection: asyncpg.Connection, departments: list[Department]) -> None:
    now = datetime.now(UTC)
    rows = [
        (uuid.uuid4(), f"cn={slug}-{kind},ou=groups,dc=example,dc=org", department_id, now)
        for department_id, slug in departments
        for kind in ("staff", "contractors")
    ]
    await connection.copy_records_to_table(
        "group_mappings", records=rows, columns=("id", "group", "department_id", "created_at")
    )
