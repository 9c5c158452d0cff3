"""Each conversation test runs on both databases: the embedded SQLite file and a fresh,
migrated Postgres database (dropped after)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import update

from gateway.db.engine import create_engine
from gateway.db.models import Conversation
from tests.gateway.conversations.people import People, people
from tests.gateway.helpers import client_for, embedded_gateway
from tests.gateway.postgres import fresh_postgres


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, People]]:
    """(database URL, signed-in people) on each database in turn."""
    if request.param == "sqlite":
        gateway = embedded_gateway(tmp_path)
        with client_for(gateway) as client:
            yield gateway.settings.effective_database_url, people(client, gateway)
        return
    database_url = request.getfixturevalue("database_url")
    with fresh_postgres(database_url, "enclave_conv") as url:
        gateway = embedded_gateway(tmp_path, database_url=url)
        with client_for(gateway) as client:
            yield url, people(client, gateway)


def set_updated_at(database_url: str, ids: list[uuid.UUID | str], moment: datetime) -> None:
    """Give conversations one updated_at, as concurrent writes in one microsecond would."""

    async def run() -> None:
        engine = create_engine(database_url)
        try:
            async with engine.begin() as connection:
                await connection.execute(
                    update(Conversation)
                    .where(Conversation.id.in_([uuid.UUID(str(i)) for i in ids]))
                    .values(updated_at=moment)
                )
        finally:
            await engine.dispose()

    asyncio.run(run())
