"""Fresh Postgres databases on the test server, one per test that needs an empty one."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import create_async_engine


async def _admin_sql(url: str, statement: str) -> None:
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(sa.text(statement))
    finally:
        await engine.dispose()


@contextlib.contextmanager
def fresh_postgres(database_url: str, prefix: str = "enclave_test") -> Iterator[str]:
    """A new, empty database beside ``database_url``'s; dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    asyncio.run(_admin_sql(database_url, f'CREATE DATABASE "{name}"'))
    try:
        yield database_url.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(_admin_sql(database_url, f'DROP DATABASE "{name}" WITH (FORCE)'))
