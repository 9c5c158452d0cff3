"""Shared fixtures: the real services that `make test` (scripts/services.sh) provides."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

CACHE_ENV = "INFERENCE_CACHE_DIR"  # inference/cache_dir.py


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


@pytest.fixture(scope="session", autouse=True)
def inference_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The workers' start-up caches (prepared weights, built kernels) in a folder of this
    session, not the user's ~/.cache: workers the tests start inherit it."""
    preset = os.environ.get(CACHE_ENV)
    folder = tmp_path_factory.mktemp("inference-cache")
    os.environ[CACHE_ENV] = str(folder)
    yield folder
    if preset is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = preset
