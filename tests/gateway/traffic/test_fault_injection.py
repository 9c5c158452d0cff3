"""Faults under mixed traffic, with the books checked afterwards.

500 requests of every kind (answers, streams with and without usage, streams the client
cancels, requests over a quota, bad bodies) go through a gateway on Postgres and Redis to
a real worker, while Postgres is cut, Redis is cut (with streams in flight, so their
settlements cannot reach it), and the worker is killed in the middle of a stream. Then:
exactly 500 audit records, a chain that verifies, every limits counter a whole number
equal to the usage the records settled, and no concurrency slot left taken.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import redis

from gateway.domain.limits import periods
from tests.gateway.traffic.conftest import RunningGateway, running_gateway, verify_records
from tests.gateway.traffic.processes import fresh_postgres, link_to, worker_process
from tests.inference.server.conftest import free_port

TOTAL = 500
CONCURRENCY = 6
PREFIX = "enclave:limits"


class Traffic:
    """Sends requests of six kinds in turn and counts every one it sends."""

    def __init__(self, gateway: RunningGateway, keys: dict[str, str]) -> None:
        self.url = gateway.url
        self.keys = keys
        self.clients = {name: gateway.client(key) for name, key in keys.items()}
        self.sent = 0
        self._lock = threading.Lock()

    def run(self, count: int) -> None:
        start = self.sent
        with ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(self.one, range(start, start + count)))

    def count(self) -> None:
        with self._lock:
            self.sent += 1

    def long_stream(self, content: str, max_tokens: int) -> Any:
        return self.clients["quality"].chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": content}],
            max_tokens=max_tokens,
            stream=True,
            extra_body={"ignore_eos": True},
        )

    def one(self, i: int) -> None:
        self.count()
        kind = i % 6
        quality, common = self.clients["quality"], {"model": "tiny", "temperature": 0}
        chat = [{"role": "user", "content": f"Inspection {i}: is the bore in tolerance?"}]
        try:
            if kind == 0:
                quality.chat.completions.create(messages=chat, max_tokens=4, **common)
            elif kind in (1, 2):
                options = {"include_usage": True} if kind == 1 else None
                stream = quality.chat.completions.create(
                    messages=chat, max_tokens=4, stream=True, stream_options=options, **common
                )
                list(stream)
            elif kind == 3:
                self.cancelled_stream(chat)
            elif kind == 4:  # a department with a tiny daily quota: soon 429s
                self.clients["office"].chat.completions.create(
                    messages=chat, max_tokens=8, **common
                )
            else:
                body = b'{"model": "tiny", "messages": "not a list"}' if i % 12 else b"{nope"
                httpx.post(
                    f"{self.url}/v1/chat/completions",
                    content=body,
                    headers={"authorization": f"Bearer {self.keys['quality']}"},
                    timeout=30,
                )
        except (openai.APIError, httpx.HTTPError):
            pass  # refusals and breaks are part of the mix; the records tell them apart

    def cancelled_stream(self, chat: list[dict[str, str]]) -> None:
        stream = self.long_stream(chat[0]["content"], 100)
        for _ in stream:
            break
        stream.close()

    def streams_in_flight(self, count: int, then: Any) -> None:
        """``count`` long streams; ``then()`` once each has its first chunk; the rest read."""
        started = threading.Barrier(count + 1)

        def stream(_: int) -> None:
            self.count()
            iterator = iter(self.long_stream("Write the shift report.", 40))
            next(iterator)
            started.wait(30)
            for _ in iterator:
                pass

        with ThreadPoolExecutor(count) as pool:
            done = [pool.submit(stream, i) for i in range(count)]
            started.wait(30)
            then()
            for future in done:
                future.result(60)

    def killed_mid_stream(self, worker: Any) -> None:
        self.count()
        stream = self.long_stream("A long answer, please.", 200)
        try:
            for received, _ in enumerate(stream):
                if received == 2:
                    worker.kill()
        except openai.APIError:
            pass


def _wait_until_served(traffic: Traffic, timeout: float = 30) -> None:
    """The gateway's health check has seen the restarted worker (without a request)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listed = httpx.get(
            f"{traffic.url}/v1/models",
            headers={"authorization": f"Bearer {traffic.keys['quality']}"},
        )
        traffic.count()
        if listed.status_code == 200 and listed.json()["data"]:
            return
        time.sleep(0.3)
    raise AssertionError("the gateway did not see the restarted worker")


def _counters(store: redis.Redis, scope: str) -> dict[str, str]:
    raw = store.hgetall(f"{PREFIX}:{scope}:quota")
    return {k.decode(): v.decode() for k, v in raw.items()}


def test_faults_under_mixed_traffic_lose_no_record_and_leave_exact_counters(
    tiny_checkpoint: Path, database_url: str, redis_url: str, tmp_path: Path
) -> None:
    port = free_port()
    worker = worker_process(tiny_checkpoint, port, tmp_path / "worker.log")
    first_day = periods.day_of(time.time_ns() // 1000)
    try:
        with fresh_postgres(database_url) as database:
            with (
                link_to(database) as (postgres, database_through),
                link_to(redis_url) as (redis_link, redis_through),
                running_gateway(
                    tmp_path,
                    [f"http://127.0.0.1:{port}"],
                    database_url=database_through,
                    redis_url=redis_through,
                ) as gateway,
            ):
                keys = {
                    "quality": gateway.department("quality", concurrent_requests=64),
                    "office": gateway.department("office", daily_token_quota=150),
                }
                traffic = Traffic(gateway, keys)
                traffic.run(100)
                postgres.cut()
                traffic.run(100)
                postgres.restore()
                traffic.streams_in_flight(6, then=redis_link.cut)  # settlements must wait
                traffic.run(94)
                redis_link.restore()
                traffic.killed_mid_stream(worker)
                worker.wait()
                traffic.run(24)  # no worker: refused before anything is reserved
                worker = worker_process(tiny_checkpoint, port, tmp_path / "worker.log")
                _wait_until_served(traffic)
                traffic.run(TOTAL - traffic.sent)
                assert traffic.sent == TOTAL

                records = gateway.audit_records(wait_for=TOTAL, timeout=60)
                _check_books(records, redis_url, first_day)
            # The gateway is closed: everything it held is written. Every kind of record
            # is in the chain (admin ones too), and it verifies with the head log beside it.
            ok, checked = asyncio.run(verify_records(database, tmp_path))
            assert (ok, checked) == (True, TOTAL)
    finally:
        worker.kill()
        worker.wait()


def _check_books(records: list[dict[str, Any]], redis_url: str, first_day: int) -> None:
    assert len(records) == TOTAL
    assert len({r["request_id"] for r in records}) == TOTAL
    reasons = {r["reason"] for r in records}
    # The mix did what it claims: each fault and each kind of refusal is in the log.
    for reason in (
        "",
        "bad_request",
        "client_disconnected",
        "rate_limit:tokens_per_day",
        "limiter_unavailable",
        "upstream_broke",
        "no_upstream",
    ):
        assert reason in reasons, (reason, sorted(reasons))
    store = redis.Redis.from_url(redis_url)
    try:
        # Settlements Redis missed are retried in the background: give them a moment.
        deadline = time.monotonic() + 15
        while True:
            mismatches = _mismatches(store, records, first_day)
            if not mismatches or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert not mismatches
    finally:
        store.close()


def _mismatches(
    store: redis.Redis, records: list[dict[str, Any]], first_day: int
) -> list[tuple[str, dict[str, str], int]]:
    same_day = periods.day_of(time.time_ns() // 1000) == first_day
    found = []
    scopes: dict[str, int] = {}
    for record in records:
        used = record["prompt_tokens"] + record["completion_tokens"]
        for scope in (f"dept:{record['department_id']}", f"key:{record['api_key_id']}"):
            scopes[scope] = scopes.get(scope, 0) + used
    for scope, used in scopes.items():
        counters = _counters(store, scope)
        whole = all(value.isdigit() for value in counters.values())
        exact = int(counters.get("mu", "0")) == used
        if same_day:
            exact = exact and int(counters.get("du", "0")) == used
        slots = store.zcard(f"{PREFIX}:{scope}:conc")
        if not (whole and exact and slots == 0):
            found.append((scope, counters, used))
    return found
