"""The real services that the suite relies on are reachable, as `make test` promises."""

from __future__ import annotations

import asyncpg
import redis.asyncio as aioredis


async def test_postgres_answers(database_url: str) -> None:
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg", "postgresql"))
    try:
        assert await conn.fetchval("SELECT 40 + 2") == 42
    finally:
        await conn.close()


async def test_redis_answers(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    try:
        await client.set("enclave:test:probe", "1", ex=10)
        assert await client.get("enclave:test:probe") == b"1"
    finally:
        await client.aclose()
