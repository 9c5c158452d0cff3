"""A worker on a tiny random checkpoint, served by uvicorn in a thread, for the API tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn

from inference.server.app import create_app
from inference.server.settings import ServerSettings

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine

API_KEY = "test-internal-token"
MODEL = "tiny"
MAX_MODEL_LEN = 256


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.inference.checkpoints import make_checkpoint

    return make_checkpoint("llama", tmp_path_factory.mktemp("worker-llama"))


def tiny_engine(checkpoint: Path, **overrides: Any) -> LLMEngine:
    # Imported here so that the unit tests beside these run without loading the engine.
    from inference.engine.engine_config import EngineConfig
    from inference.engine.llm_engine import LLMEngine

    config = {
        "dtype": "float32",
        "max_model_len": MAX_MODEL_LEN,
        "kv_cache_memory_bytes": 4 << 20,
        "max_num_seqs": 8,
        "progress": False,
        **overrides,
    }
    return LLMEngine(EngineConfig(model=str(checkpoint), **config))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def serving(app: Any, port: int | None = None) -> Iterator[str]:
    """Run ``app`` on 127.0.0.1 (a free port unless given) until the block ends; yield its
    base URL."""
    port = port or free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test worker did not start")
        time.sleep(0.02)
    try:
        yield base_url
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="session")
def worker_url(checkpoint: Path) -> Iterator[str]:
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_app(tiny_engine(checkpoint), settings)) as url:
        yield url


@pytest.fixture
def http(worker_url: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=worker_url, headers=headers, timeout=60) as client:
        yield client


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text page (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0
