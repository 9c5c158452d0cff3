"""Entries, writers and database reads shared by the audit tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.engine import create_engine, session_factory
from gateway.domain.audit.entry import AuditEntry
from gateway.domain.audit.seal import ChainSeal
from gateway.domain.audit.verify import VerifyResult, verify_chain
from gateway.domain.audit.writer import AuditWriter
from gateway.secret_store import resolve_secret_key
from gateway.settings import Settings

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def entry(n: int, tag: str = "t", **overrides: Any) -> AuditEntry:
    values: dict[str, Any] = {
        "created_at": T0 + timedelta(milliseconds=n),
        "request_id": f"{tag}-{n}",
        "status_code": 200,
        "endpoint": "/v1/chat/completions",
        "model": "smollm2",
        "user_id": uuid.UUID(int=n % 3),
        "user_email": f"user{n % 3}@example.test",
        "department_slug": "research",
        "prompt_tokens": n,
        "completion_tokens": 2 * n,
        "ttft_ms": 12.5 if n % 2 else None,
        "latency_ms": 100.25 + n,
        "client_ip": "10.0.0.1",
        "user_agent": "pytest",
    }
    values.update(overrides)
    return AuditEntry(**values)


@asynccontextmanager
async def sessions(url: str) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    engine = create_engine(url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


def seal_for(data_dir: Path) -> ChainSeal:
    """The seal a gateway (or the CLI) with ``ENCLAVE_DATA_DIR=data_dir`` uses: the secret
    generated there and the head log beside it."""
    settings = Settings(data_dir=data_dir)
    return ChainSeal.build(resolve_secret_key(settings), settings.audit_head_path)


@asynccontextmanager
async def running_writer(url: str, spool_dir: Path, **options: Any) -> AsyncIterator[AuditWriter]:
    """A writer sealing as a gateway whose data directory holds ``spool_dir`` would."""
    options = {"batch_size": 50, "flush_interval": 0.005, "retry_interval": 0.1, **options}
    async with sessions(url) as db:
        writer = AuditWriter(db, spool_dir, seal_for(spool_dir.parent), **options)
        await writer.start()
        try:
            yield writer
        finally:
            await writer.close()


async def sql(url: str, statement: str) -> list[Any]:
    async with sessions(url) as db, db.begin() as session:
        result = await session.execute(sa.text(statement))
        return list(result.all()) if statement.lstrip().upper().startswith("SELECT") else []


async def verify(url: str, data_dir: Path) -> VerifyResult:
    async with sessions(url) as db, db() as session:
        return await verify_chain(session, seal_for(data_dir))


async def request_ids_in_seq_order(url: str) -> list[str]:
    """The API requests' ids (admin and prune records left out), in chain order."""
    statement = "SELECT request_id FROM request_records WHERE action = 'api.request' ORDER BY seq"
    return [r[0] for r in await sql(url, statement)]
