"""The console benchmark's audit records and the usage rollups that count them.

Records go in by COPY, a batch at a time. The request_records indexes that no constraint
needs are dropped for the COPY and made again afterwards (from their own definitions, so
the schema is the migrations' exactly): building an index once is much faster than keeping
it up row by row. ``prev_hash``/``hash`` are random filler, not an HMAC chain: nothing here
verifies the chain, and the console reads the columns only to show them. Each request is
counted with the audit writer's own rules (``usage.rollup``), so the rollups are what a
running gateway would have written for these records.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import asyncpg

from gateway.db.models.usage import COUNTER_COLUMNS, REFUSAL_COLUMNS
from gateway.domain.audit.chain import CHAIN_ROW_ID
from gateway.domain.usage.rollup import (
    API_REQUEST,
    RATE_LIMIT_PREFIX,
    Bucket,
    accumulate,
    by_department,
    department_bucket_id,
    request_counters,
)

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
Department = tuple[uuid.UUID, str]  # id, slug
Person = tuple[uuid.UUID, str, uuid.UUID, str]  # id, email, department id, department slug


Rollups = dict[Bucket, dict[str, int]]


@dataclass(slots=True)
class Written:
    """What seeding the records left: their rollups, the seqs, the busiest department."""

    rollups: Rollups
    first_seq: int
    last_seq: int
    busiest_department: uuid.UUID | None


async def write_records(
    connection: asyncpg.Connection,
    count: int,
    days: int,
    users: list[Person],
    keys: list[tuple[uuid.UUID, Department]],
    now: datetime,
    rng: random.Random,
) -> Written:
    """``count`` records over the last ``days`` days after the chain's head, which then
    moves to the last of them."""
    head = await connection.fetchrow(
        "SELECT head_seq, head_hash FROM audit_chain WHERE id = $1", CHAIN_ROW_ID
    )
    assert head is not None, "the database is not migrated"
    dropped = await _drop_plain_indexes(connection, "request_records")
    rollups: Rollups = {}
    per_department: dict[uuid.UUID, int] = {}
    prev_hash, seq = str(head["head_hash"]), int(head["head_seq"])
    first_seq = seq + 1
    first = now - timedelta(days=days)
    step = days * 86400 / max(count, 1)
    generator = _Generator(users, keys, rng)
    done = 0
    while done < count:
        batch = []
        for i in range(done, min(done + BATCH, count)):
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
    busiest = max(per_department, key=per_department.__getitem__) if per_department else None
    return Written(rollups, first_seq, seq, busiest)


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
        bucket = Bucket(at.date(), department_id, user_id, key_id, "ui" if via_ui else "api")
        accumulate(rollups, bucket, request_counters(status, reason, prompt, completion, cached))
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


async def write_rollups(connection: asyncpg.Connection, rollups: Rollups) -> int:
    """usage_daily's rows, as the audit writer would have kept them."""

    def rows() -> Iterator[tuple[Any, ...]]:
        for bucket, counts in rollups.items():
            yield (
                bucket.id, bucket.day, bucket.department_id, bucket.user_id, bucket.api_key_id,
                bucket.via, *(counts[name] for name in COUNTER_COLUMNS),
            )  # fmt: skip

    columns = ("id", "day", "department_id", "user_id", "api_key_id", "via", *COUNTER_COLUMNS)
    await connection.copy_records_to_table("usage_daily", records=rows(), columns=columns)
    return len(rollups)


async def write_department_rollups(connection: asyncpg.Connection, rollups: Rollups) -> int:
    """usage_daily_departments' rows: the same buckets summed per (day, department, via).
    Summed here rather than by an INSERT ... SELECT from usage_daily: the rows' ids are
    uuid5s, which Postgres does not compute."""
    coarse = by_department(rollups)

    def rows() -> Iterator[tuple[Any, ...]]:
        for (day, department_id, via), counts in coarse.items():
            row_id = department_bucket_id(day, department_id, via)
            yield (row_id, day, department_id, via, *(counts[name] for name in COUNTER_COLUMNS))

    columns = ("id", "day", "department_id", "via", *COUNTER_COLUMNS)
    await connection.copy_records_to_table(
        "usage_daily_departments", records=rows(), columns=columns
    )
    return len(coarse)
