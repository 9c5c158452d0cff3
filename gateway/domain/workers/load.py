"""The load the admin's workers view shows: each worker's /metrics, scraped on demand.

A scrape is one GET with a short timeout, on the pool's HTTP client; /metrics is open on
the worker, so no token travels. A worker that does not answer (or answers something
else) has no load to show: None, and why, never an error for the whole view.

Tokens per second come from the generation-token counter's growth between two scrapes of
the same worker, so the first view after a start has none yet. Scrapes closer together
than ``MIN_WINDOW_S`` keep the earlier scrape as the base and repeat the last rate, so a
burst of views does not turn into rates over milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from gateway.domain.workers.worker_metrics import WorkerSample, parse

SCRAPE_TIMEOUT_S = 2.0
MIN_WINDOW_S = 1.0


@dataclass(frozen=True, slots=True)
class Scrape:
    sample: WorkerSample | None
    tokens_per_s: float | None
    error: str = ""


@dataclass(slots=True)
class _Base:
    at: float
    tokens: float
    rate: float | None = None


class LoadScraper:
    def __init__(self, timeout: float = SCRAPE_TIMEOUT_S) -> None:
        self.timeout = timeout
        self._bases: dict[str, _Base] = {}

    async def scrape_all(self, client: httpx.AsyncClient, urls: list[str]) -> list[Scrape]:
        return list(await asyncio.gather(*(self.scrape(client, url) for url in urls)))

    async def scrape(self, client: httpx.AsyncClient, url: str) -> Scrape:
        try:
            reply = await client.get(f"{url}/metrics", timeout=self.timeout)
            if reply.status_code != 200:
                return Scrape(None, None, f"/metrics answered {reply.status_code}")
        except httpx.HTTPError as exc:
            return Scrape(None, None, f"/metrics did not answer: {type(exc).__name__}")
        try:
            sample = parse(reply.text)
        except Exception as exc:  # whatever a worker sends, the view shows the rest
            return Scrape(None, None, f"/metrics is not Prometheus text: {exc}")
        return Scrape(sample, self._rate(url, sample.generation_tokens, time.monotonic()))

    def _rate(self, url: str, tokens: float | None, now: float) -> float | None:
        if tokens is None:
            self._bases.pop(url, None)
            return None
        base = self._bases.get(url)
        if base is None or tokens < base.tokens:  # first scrape, or the worker restarted
            self._bases[url] = _Base(now, tokens)
            return None
        if now - base.at < MIN_WINDOW_S:
            return base.rate
        rate = (tokens - base.tokens) / (now - base.at)
        self._bases[url] = _Base(now, tokens, rate)
        return rate
