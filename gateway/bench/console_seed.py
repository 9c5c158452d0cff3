"""Seeding a console benchmark's database: departments, users, keys, audit records, rollups.

Bulk COPY through asyncpg, not the ORM: a million audit records through SQLAlchemy would
take longer than the benchmark. The request_records indexes that no constraint needs are
dropped for the COPY and made again afterwards (from their own definitions, so the schema
is the migrations' exactly): building an index once is much faster than keeping it up row
by row. The records' ``prev_hash``/``hash`` are random filler, not an HMAC chain: nothing
here verifies the chain, and the console reads the columns only to show them.

The data is shaped like a busy appliance: most traffic through API keys, some through the
web UI, use skewed towards a few busy keys and users, refusals (429) and errors mixed in,
and a sprinkle of admin actions and sign-ins, spread evenly over the last ``days`` days.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import asyncpg

from gateway.db.models.usage import COUNTER_COLUMNS, REFUSAL_COLUMNS
from gateway.domain.audit.chain import CHAIN_ROW_ID
from gateway.domain.keys.tokens import KEY_PREFIX
from gateway.domain.usage.rollup import (
    API_REQUEST,
    RATE_LIMIT_PREFIX,
    bucket_id,
    department_bucket_id,
)

FIRST_NAMES = ("anna", "ben", "chen", "dara", "emil", "fatima", "gabor", "hana", "ivan", "julia")
LAST_NAMES = ("smith", "meier", "nowak", "rossi", "garcia", "kim", "okafor", "larsen", "silva")
SERVICES = ("ingest", "search", "summarizer", "ticketing", "crm", "notebook", "reporting", "ci")
MODELS = ("llama-3.1-8b-instruct", "qwen2.5-7b-instruct", "smollm2-135m-instruct")
ADMIN_ACTIONS = (
    ("key.create", "api_key"),
    ("key.revoke", "api_key"),
    ("key.update", "api_key"),
    ("user.update", "user"),
    ("department.update", "department"),
    ("group_mapping.create", "group_mapping"),
    ("auth.login", "user"),
    ("auth.login_failed", "user"),
)
REFUSALS = tuple(REFUSAL_COLUMNS)
BATCH = 100_000  # records generated and copied at a time: bounded memory
RECORD_COLUMNS = (
    "seq", "created_at", "request_id", "user_id", "user_email", "api_key_id",
    "department_id", "department_slug", "model", "endpoint", "status_code", "streamed",
    "prompt_tokens", "cached_tokens", "completion_tokens", "ttft_ms", "latency_ms",
    "client_ip", "user_agent", "upstream", "reason", "error", "prompt_body",
    "response_body", "action", "target_type", "target_id", "details",
    "client_request_id", "prev_hash", "hash",
)  # fmt: skip


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
        rollups, busiest = await _records(connection, sizes, users, keys, now, rng, seeded)
        seeded.busiest_department = busiest
        seeded.seconds["audit_records"] = time.perf_counter() - start
        start = time.perf_counter()
        seeded.rollup_rows = await _rollups(connection, rollups)
        seeded.seconds["usage_daily"] = time.perf_counter() - start
        start = time.perf_counter()
        seeded.department_rollup_rows = await _department_rollups(connection, rollups)
        seeded.seconds["usage_daily_departments"] = time.perf_counter() - start
        start = time.perf_counter()
        # What autovacuum would have done on a running appliance: statistics for the
        # planner, and a visibility map so index-only scans need not visit the heap.
        await connection.execute("VACUUM (ANALYZE)")
        seeded.seconds["vacuum_analyze"] = time.perf_counter() - start
    finally:
        await connection.close()
    return seeded


Department = tuple[uuid.UUID, str]  # id, slug
Person = tuple[uuid.UUID, str, uuid.UUID, str]  # id, email, department id, department slug


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


Rollups = dict[tuple[date, uuid.UUID | None, uuid.UUID | None, uuid.UUID | None, str], list[int]]


async def _records(
    connection: asyncpg.Connection,
    sizes: Sizes,
    users: list[Person],
    keys: list[tuple[uuid.UUID, Department]],
    now: datetime,
    rng: random.Random,
    seeded: Seeded,
) -> tuple[Rollups, uuid.UUID | None]:
    head = await connection.fetchrow(
        "SELECT head_seq, head_hash FROM audit_chain WHERE id = $1", CHAIN_ROW_ID
    )
    assert head is not None, "the database is not migrated"
    dropped = await _drop_plain_indexes(connection, "request_records")
    rollups: Rollups = {}
    per_department: dict[uuid.UUID, int] = {}
    prev_hash, seq = str(head["head_hash"]), int(head["head_seq"])
    seeded.first_seq = seq + 1
    first = now - timedelta(days=sizes.days)
    step = sizes.days * 86400 / max(sizes.records, 1)
    generator = _Generator(users, keys, rng)
    done = 0
    while done < sizes.records:
        batch = []
        for i in range(done, min(done + BATCH, sizes.records)):
            seq += 1
            at = first + timedelta(seconds=i * step)
            row = generator.record(seq, at, prev_hash, rollups, per_department)
            prev_hash = row[-1]
            batch.append(row)
        await connection.copy_records_to_table(
            "request_records", records=batch, columns=RECORD_COLUMNS
        )
        done += len(batch)
    for statement in dropped:
        await connection.execute(statement)
    await connection.execute(
        "UPDATE audit_chain SET head_seq = $1, head_hash = $2 WHERE id = $3",
        seq,
        prev_hash,
        CHAIN_ROW_ID,
    )
    seeded.last_seq = seq
    busiest = max(per_department, key=per_department.__getitem__) if per_department else None
    return rollups, busiest


async def _drop_plain_indexes(connection: asyncpg.Connection, table: str) -> list[str]:
    """Drop ``table``'s indexes that back no constraint; returns the statements that make
    them again."""
    rows = await connection.fetch(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = $1 AND indexname NOT IN"
        " (SELECT conname FROM pg_constraint WHERE conrelid = $1::regclass)",
        table,
    )
    for row in rows:
        await connection.execute(f'DROP INDEX "{row["indexname"]}"')
    return [str(row["indexdef"]) for row in rows]


class _Generator:
    """One record at a time; skewed choices so a few keys and users do most of the work."""

    def __init__(
        self, users: list[Person], keys: list[tuple[uuid.UUID, Department]], rng: random.Random
    ) -> None:
        self.users, self.keys, self.rng = users, keys, rng
        self.ips = [f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"
                    for _ in range(2000)]  # fmt: skip

    def _skewed(self, items: list[Any]) -> Any:
        return items[int(len(items) * self.rng.random() ** 3)]

    def record(
        self,
        seq: int,
        at: datetime,
        prev_hash: str,
        rollups: Rollups,
        per_department: dict[uuid.UUID, int],
    ) -> tuple[Any, ...]:
        rng = self.rng
        request_id = f"{rng.getrandbits(128):032x}"
        digest = f"{rng.getrandbits(256):064x}"
        if rng.random() < 0.005:
            return self._admin_action(seq, at, request_id, prev_hash, digest)
        via_ui = rng.random() < 0.25 or not self.keys
        user_id: uuid.UUID | None = None
        key_id: uuid.UUID | None = None
        email, agent = "", "OpenAI/Python 1.54.0"
        if via_ui:
            user_id, email, department_id, slug = self._skewed(self.users)
            agent = "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0"
        else:
            key_id, (department_id, slug) = self._skewed(self.keys)
        roll = rng.random()
        status, reason, error = 200, "", ""
        prompt, completion = rng.randrange(20, 4000), rng.randrange(1, 800)
        if roll < 0.03:
            status, reason = 429, RATE_LIMIT_PREFIX + rng.choice(REFUSALS)
            prompt = completion = 0
        elif roll < 0.035:
            status, reason, error = 502, "upstream_error", "the worker closed the connection"
            completion = 0
        elif roll < 0.045:
            status, reason, error = 400, "bad_request", "messages: must not be empty"
            prompt = completion = 0
        cached = prompt // 2 if rng.random() < 0.3 else 0
        details = '{"via":"ui"}' if via_ui else None
        self._count(rollups, at.date(), department_id, user_id, key_id, via_ui, status, reason,
                    (prompt, completion, cached))  # fmt: skip
        per_department[department_id] = per_department.get(department_id, 0) + 1
        latency = rng.uniform(50, 9000) if status == 200 else rng.uniform(1, 30)
        return (
            seq, at, request_id, user_id, email, key_id, department_id, slug,
            rng.choice(MODELS), "/v1/chat/completions", status, status == 200,
            prompt, cached, completion, latency / 10 if status == 200 else None, latency,
            rng.choice(self.ips), agent, "http://10.0.0.5:8100" if status == 200 else "",
            reason, error, None, None, API_REQUEST, "", "", details, "", prev_hash, digest,
        )  # fmt: skip

    def _admin_action(
        self, seq: int, at: datetime, request_id: str, prev_hash: str, digest: str
    ) -> tuple[Any, ...]:
        rng = self.rng
        action, target_type = rng.choice(ADMIN_ACTIONS)
        actor_id, email, department_id, slug = rng.choice(self.users)
        target = str(rng.choice(self.keys)[0]) if target_type == "api_key" and self.keys else ""
        details = json.dumps({"before": {"name": "old"}, "after": {"name": "new"}})
        status = 401 if action == "auth.login_failed" else 200
        return (
            seq, at, request_id, actor_id, email, None, department_id, slug, "", "", status,
            False, 0, 0, 0, None, rng.uniform(2, 40), rng.choice(self.ips),
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0", "", "", "", None, None, action,
            target_type, target or str(actor_id), details, "", prev_hash, digest,
        )  # fmt: skip

    @staticmethod
    def _count(
        rollups: Rollups,
        day: date,
        department_id: uuid.UUID,
        user_id: uuid.UUID | None,
        key_id: uuid.UUID | None,
        via_ui: bool,
        status: int,
        reason: str,
        tokens: tuple[int, int, int],
    ) -> None:
        """What rollup.counters_of adds for one request, in COUNTER_COLUMNS order."""
        bucket = (day, department_id, user_id, key_id, "ui" if via_ui else "api")
        counts = rollups.get(bucket)
        if counts is None:
            counts = rollups[bucket] = [0] * len(COUNTER_COLUMNS)
        counts[0] += 1
        counts[1] += tokens[0]
        counts[2] += tokens[1]
        counts[3] += tokens[2]
        if status >= 500:
            counts[4] += 1
        if reason.startswith(RATE_LIMIT_PREFIX):
            counts[5] += 1
            counts[6 + REFUSALS.index(reason.removeprefix(RATE_LIMIT_PREFIX))] += 1


async def _rollups(connection: asyncpg.Connection, rollups: Rollups) -> int:
    def rows() -> Iterator[tuple[Any, ...]]:
        for (day, department_id, user_id, key_id, via), counts in rollups.items():
            row_id = bucket_id(day, department_id, user_id, key_id, via)
            yield (row_id, day, department_id, user_id, key_id, via, *counts)

    columns = ("id", "day", "department_id", "user_id", "api_key_id", "via", *COUNTER_COLUMNS)
    await connection.copy_records_to_table("usage_daily", records=rows(), columns=columns)
    return len(rollups)


async def _department_rollups(connection: asyncpg.Connection, rollups: Rollups) -> int:
    """usage_daily's buckets summed per (day, department, via), as the audit writer keeps
    usage_daily_departments. Summed here rather than by an INSERT ... SELECT from
    usage_daily: the rows' ids are uuid5s, which Postgres does not compute."""
    coarse: dict[tuple[date, uuid.UUID | None, str], list[int]] = {}
    for (day, department_id, _user_id, _key_id, via), counts in rollups.items():
        total = coarse.setdefault((day, department_id, via), [0] * len(COUNTER_COLUMNS))
        for i, value in enumerate(counts):
            total[i] += value

    def rows() -> Iterator[tuple[Any, ...]]:
        for (day, department_id, via), counts in coarse.items():
            row_id = department_bucket_id(day, department_id, via)
            yield (row_id, day, department_id, via, *counts)

    columns = ("id", "day", "department_id", "via", *COUNTER_COLUMNS)
    await connection.copy_records_to_table(
        "usage_daily_departments", records=rows(), columns=columns
    )
    return len(coarse)
