"""A real gateway (uvicorn on loopback) in front of a real worker on a tiny random model."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway import admin_tasks
from gateway.app import create_app
from gateway.settings import Settings
from inference.server.app import create_app as create_worker_app
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

WORKER_TOKEN = API_KEY


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.inference.checkpoints import make_checkpoint

    return make_checkpoint("llama", tmp_path_factory.mktemp("gateway-worker"))


@pytest.fixture(scope="session")
def worker(tiny_checkpoint: Path) -> Iterator[str]:
    """One real worker for the whole session (its engine is the slow part to build)."""
    settings = ServerSettings(served_model_name=MODEL, api_key=WORKER_TOKEN)
    with serving(create_worker_app(tiny_engine(tiny_checkpoint), settings)) as url:
        yield url


@dataclass
class RunningGateway:
    url: str
    settings: Settings
    admin_password: str

    def department(self, slug: str, **limits: Any) -> str:
        """Create a department (with ``limits`` set) and an API key for it; return the key."""
        asyncio.run(admin_tasks.create_department(self.settings, slug.title(), slug))
        if limits:
            asyncio.run(set_limits(self.settings, slug, **limits))
        return str(asyncio.run(admin_tasks.create_key(self.settings, slug, "tests", None, None)))

    def client(self, key: str, **options: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **options)

    def audit_records(self, wait_for: int, timeout: float = 15) -> list[dict[str, Any]]:
        """The API requests' records in chain order, once there are at least ``wait_for``."""
        deadline = time.monotonic() + timeout
        while True:
            rows = asyncio.run(read_records(self.settings.effective_database_url))
            if len(rows) >= wait_for or time.monotonic() > deadline:
                return rows
            time.sleep(0.05)


async def read_records(
    database_url: str, action: str | None = "api.request"
) -> list[dict[str, Any]]:
    """The records of ``action`` (None: every record) in chain order."""
    from sqlalchemy import select

    from gateway.db.engine import create_engine
    from gateway.db.models import RequestRecord

    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            table = RequestRecord.__table__
            statement = select(table).order_by(table.c.seq)
            if action is not None:
                statement = statement.where(table.c.action == action)
            result = await connection.execute(statement)
            return [dict(row._mapping) for row in result]
    finally:
        await engine.dispose()


async def set_limits(settings: Settings, slug: str, **limits: Any) -> None:
    from gateway.domain.departments.schemas import DepartmentUpdate
    from gateway.domain.departments.service import DepartmentService

    async with admin_tasks.transaction(settings) as db:
        service = DepartmentService(db)
        row = await service.by_slug(slug)
        await service.update(row.id, DepartmentUpdate(**limits))


@contextlib.contextmanager
def running_gateway(
    tmp_path: Path, workers: list[str], app_options: dict[str, Any] | None = None, **overrides: Any
) -> Iterator[RunningGateway]:
    settings = Settings(
        data_dir=tmp_path,
        workers=",".join(workers),
        worker_token=WORKER_TOKEN,
        health_interval_ms=200,
        **overrides,
    )
    admin_tasks.migrate_database(settings)
    password = asyncio.run(admin_tasks.create_admin(settings, "root@example.test"))
    with serving(create_app(settings, **(app_options or {}))) as url:
        yield RunningGateway(url, settings, password)


@pytest.fixture
def gateway(tmp_path: Path, worker: str) -> Iterator[RunningGateway]:
    with running_gateway(tmp_path, [worker]) as running:
        yield running


async def verify_records(database_url: str, data_dir: Path) -> tuple[bool, int]:
    """Whether the chain verifies (with the seal of a gateway on ``data_dir``), and how many
    API request records it holds."""
    from gateway.db.engine import create_engine, session_factory
    from gateway.domain.audit.verify import verify_chain
    from tests.gateway.audit.support import seal_for

    engine = create_engine(database_url)
    try:
        async with session_factory(engine)() as db:
            result = await verify_chain(db, seal_for(data_dir))
        return result.ok, len(await read_records(database_url))
    finally:
        await engine.dispose()
