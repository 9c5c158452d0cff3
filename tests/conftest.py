"""Shared fixtures: the real services that `make test` (scripts/services.sh) provides."""

from __future__ import annotations

import os

import pytest


def _required_env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the suite with `make test`, which starts the services")
    return value


@pytest.fixture(scope="session")
def database_url() -> str:
    """SQLAlchemy URL of the test Postgres database."""
    return _required_env("TEST_DATABASE_URL")


@pytest.fixture(scope="session")
def redis_url() -> str:
    return _required_env("TEST_REDIS_URL")
