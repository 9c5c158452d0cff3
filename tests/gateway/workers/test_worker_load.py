"""A worker's load from its own /metrics: the parsing (on text a real worker wrote), the
rate between scrapes, and a scrape of a real worker on a tiny model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gateway.domain.workers import load
from gateway.domain.workers.load import LoadScraper
from gateway.domain.workers.worker_metrics import WorkerSample, parse
from inference.server.app import create_app as create_worker_app
from inference.server.settings import ServerSettings
from tests.gateway.workers.conftest import StubWorker
from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

# Scraped from a real worker (tiny model) after three completions of one long prompt,
# two for the tenant "research" and one for "legal".
SAMPLE = (Path(__file__).parent / "worker_metrics.txt").read_text()
ENGINE_GAUGES = ("requests_running", "requests_waiting", "kv_cache")


def test_the_real_workers_text_reads_as_its_load() -> None:
    sample = parse(SAMPLE)
    assert sample == WorkerSample(
        requests_waiting=0.0,
        requests_running=0.0,
        kv_cache_usage=0.0,
        generation_tokens=24.0,  # 16 for research and 8 for legal: summed over tenants
        prefix_cache_queries=636.0,
        prefix_cache_hits=416.0,
    )
    assert sample.prefix_cache_hit_rate == pytest.approx(416 / 636)


def test_a_loading_worker_has_no_engine_figures() -> None:
    # While the weights load, the engine collector yields nothing; the counters are there.
    lines = [line for line in SAMPLE.splitlines() if not any(g in line for g in ENGINE_GAUGES)]
    sample = parse("\n".join(lines) + "\n")
    assert (sample.requests_running, sample.requests_waiting, sample.kv_cache_usage) == (
        None,
        None,
        None,
    )
    assert sample.generation_tokens == 24.0
    assert parse("").prefix_cache_hit_rate is None  # nothing looked up yet: no rate


@pytest.mark.parametrize("text", ["<html>oops</html>", "inference_requests_running{ 1"])
def test_text_that_is_not_prometheus_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse(text)


def test_tokens_per_second_between_scrapes(monkeypatch: pytest.MonkeyPatch) -> None:
    scraper = LoadScraper()
    rate = scraper._rate
    assert rate("w", 100.0, now=10.0) is None  # the first scrape: nothing to compare
    assert rate("w", 150.0, now=12.0) == 25.0
    assert rate("w", 151.0, now=12.5) == 25.0  # too close: the last rate, same base
    assert rate("w", 200.0, now=14.0) == 25.0  # (200 - 150) / 2 s
    assert rate("w", 10.0, now=15.0) is None  # the counter went back: a restarted worker
    assert rate("w", 40.0, now=17.0) == 15.0
    assert rate("w", None, now=18.0) is None  # a worker that stopped reporting
    assert rate("v", 5.0, now=18.0) is None  # each worker on its own


async def test_a_worker_that_does_not_answer_has_no_load() -> None:
    stub = StubWorker(["tiny"])
    stub.start()
    garbled = StubWorker(["tiny"])
    garbled.metrics_text = "<html>not metrics</html>"
    garbled.start()
    scraper = LoadScraper(timeout=1.0)
    try:
        async with httpx.AsyncClient() as client:
            missing, bad = await scraper.scrape_all(client, [stub.url, garbled.url])
            stub.stop()
            gone = await scraper.scrape(client, stub.url)
    finally:
        garbled.stop()
    assert missing.sample is None and missing.error == "/metrics answered 404"
    assert bad.sample is None and "not Prometheus text" in bad.error
    assert gone.sample is None and gone.error.startswith("/metrics did not answer")


@pytest.fixture(scope="module")
def real_worker(tiny_checkpoint: Path) -> Iterator[str]:
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_worker_app(tiny_engine(tiny_checkpoint), settings)) as url:
        yield url


async def test_a_real_workers_load_and_its_token_rate(
    real_worker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(load, "MIN_WINDOW_S", 0.0)
    scraper = LoadScraper()
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"model": MODEL, "prompt": "hello there, worker", "max_tokens": 8}
    async with httpx.AsyncClient(timeout=60) as client:
        before = await scraper.scrape(client, real_worker)  # no token: /metrics is open
        assert before.sample is not None and before.tokens_per_s is None, before.error
        assert before.sample.requests_waiting == 0 and before.sample.kv_cache_usage == 0
        # A fresh worker declares its token counter before any tenant's series: 0, not None.
        assert before.sample.generation_tokens is not None
        started = time.monotonic()
        reply = await client.post(f"{real_worker}/v1/completions", json=body, headers=headers)
        assert reply.status_code == 200, reply.text
        generated = reply.json()["usage"]["completion_tokens"]
        after = await scraper.scrape(client, real_worker)
        elapsed = time.monotonic() - started
    assert after.sample is not None and after.sample.generation_tokens is not None
    assert before.sample.generation_tokens is not None
    assert after.sample.generation_tokens - before.sample.generation_tokens == generated
    # The rate's window began before the request: at least the tokens over that time.
    assert after.tokens_per_s is not None and after.tokens_per_s >= generated / elapsed * 0.99
    assert after.sample.prefix_cache_hit_rate is not None
