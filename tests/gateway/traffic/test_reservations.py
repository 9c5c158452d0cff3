"""Token reservations through the proxy, to a real worker (max_model_len 256), on both
limiters: what a request may ask for, what it reserves, and that settling never costs the
audit record."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx
import openai
import pytest
import redis

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.limits.redis_limiter import DEFAULT_PREFIX
from gateway.domain.limits.types import Limiter, Reservation, Scope
from gateway.settings import Settings
from tests.gateway.traffic.conftest import (
    MODEL,
    WORKER_TOKEN,
    RunningGateway,
    running_gateway,
    set_limits,
)
from tests.inference.server.conftest import MAX_MODEL_LEN, serving

CHAT = [{"role": "user", "content": "Say something about bores."}]


@pytest.fixture(params=["memory", "redis"])
def either_gateway(
    request: pytest.FixtureRequest, tmp_path: Path, worker: str, redis_url: str
) -> Iterator[RunningGateway]:
    options = {"redis_url": redis_url} if request.param == "redis" else {}
    with running_gateway(tmp_path, [worker], **options) as gateway:
        yield gateway


@pytest.fixture
def store(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def _department(gateway: RunningGateway, slug: str, **limits: int) -> tuple[str, str]:
    """A department with ``limits`` and a key for it: the department's id, and the key."""
    department_id = asyncio.run(admin_tasks.create_department(gateway.settings, slug, slug))
    if limits:
        asyncio.run(set_limits(gateway.settings, slug, **limits))
    key = asyncio.run(admin_tasks.create_key(gateway.settings, slug, "tests", None, None))
    return department_id, str(key)


def _forget(store: redis.Redis, scopes: Sequence[str]) -> None:
    for scope in scopes:
        keys = list(store.scan_iter(f"{DEFAULT_PREFIX}:{scope}:*"))
        if keys:
            store.delete(*keys)


def test_the_huge_n_attack_is_refused_and_the_counters_stay_whole(
    tmp_path: Path, worker: str, redis_url: str, store: redis.Redis
) -> None:
    """The attack: a reservation past 2**53 that Redis stored as "1e+22", so that every
    later settlement failed and took the audit record with it, for the rest of the month."""
    with running_gateway(tmp_path, [worker], redis_url=redis_url) as gateway:
        department_id, key = _department(gateway, "research")
        headers = {"authorization": f"Bearer {key}"}
        attacks = [
            ("completions", '"prompt": "The bore", "n": 100000000000000000000', "n"),
            ("completions", '"prompt": "The bore", "n": 1e20', "n"),
            ("completions", '"prompt": "The bore", "n": 2.0', "n"),
            ("completions", '"prompt": "The bore", "best_of": 100000000000000000000', "best_of"),
            ("completions", '"prompt": "The bore", "n": 1, "max_tokens": 1e20', "max_tokens"),
            ("chat/completions", '"messages": [], "max_completion_tokens": 2147483648', None),
            ("completions", '"prompt": []', "prompt"),
        ]
        for path, fields, param in attacks:
            body = f'{{"model": "{MODEL}", "max_tokens": 100, {fields}}}'
            answer = httpx.post(f"{gateway.url}/v1/{path}", content=body, headers=headers)
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["type"] == "invalid_request_error"
            assert error["param"] == (param or "max_completion_tokens"), error
        normal = gateway.client(key).completions.create(
            model=MODEL, prompt="The bore", max_tokens=3
        )
        assert normal.usage is not None
        records = gateway.audit_records(wait_for=len(attacks) + 1)
        assert [r["status_code"] for r in records] == [400] * len(attacks) + [200]
        key_id = records[-1]["api_key_id"]
        scopes = [f"dept:{department_id}", f"key:{key_id}"]
        try:
            for scope in scopes:
                counters = store.hgetall(f"{DEFAULT_PREFIX}:{scope}:quota")
                assert counters and all(v.isdigit() for v in counters.values()), counters
                # Settled to exactly what the one admitted request used.
                assert int(counters[b"du"]) == normal.usage.total_tokens
        finally:
            _forget(store, scopes)


def test_a_batch_reserves_every_prompt_n_times(either_gateway: RunningGateway) -> None:
    """40 prompts reserve 40 prompts' worth; a day's quota is never overrun by batches."""
    gateway = either_gateway
    client = gateway.client(gateway.department("quality", daily_token_quota=300))
    with pytest.raises(openai.RateLimitError) as never:
        client.completions.create(model=MODEL, prompt=["Bore"] * 40, max_tokens=5)
    assert "can never be admitted" in never.value.message
    used = 0
    for _ in range(20):
        try:
            reply = client.completions.create(
                model=MODEL, prompt=["Bore"] * 4, n=2, max_tokens=5, extra_body={"ignore_eos": True}
            )
        except openai.RateLimitError as refused:
            assert "300 tokens per day reached" in refused.message
            break
        assert reply.usage is not None and reply.usage.completion_tokens == 4 * 2 * 5
        used += reply.usage.total_tokens
    else:
        pytest.fail("the day's quota never ran out")
    assert 0 < used <= 300


def test_without_max_tokens_a_sequence_reserves_the_workers_context(
    gateway: RunningGateway,
) -> None:
    """The worker says max_model_len 256: a request without max_tokens fits a quota of
    300 (it reserved the prompt plus 4096 before, and was refused as never fitting)."""
    key = gateway.department("office", daily_token_quota=300, tokens_per_minute=10_000)
    raw = gateway.client(key).chat.completions.with_raw_response.create(
        model=MODEL, messages=CHAT, temperature=0
    )
    assert raw.http_response.status_code == 200
    reserved = 10_000 - int(raw.headers["x-ratelimit-remaining-tokens"])
    assert 0 < reserved <= MAX_MODEL_LEN
    reply = raw.parse()
    assert reply.usage is not None and reply.usage.total_tokens <= MAX_MODEL_LEN


class DamagedOnSettle:
    """The gateway's Redis limiter, with one scope's token sum damaged (made a hash) just
    before the first settlement: Redis then fails that settlement with a real error."""

    def __init__(self, inner: Limiter, store: redis.Redis, key: str) -> None:
        self.inner, self.store, self.key = inner, store, key
        self.damaged = False

    async def admit(self, scopes: Sequence[Scope], tokens: int) -> Reservation:
        return await self.inner.admit(scopes, tokens)

    async def settle(self, reservation: Reservation, used_tokens: int) -> None:
        if not self.damaged:
            self.damaged = True
            self.store.delete(self.key)
            self.store.hset(self.key, "x", "1")
        await self.inner.settle(reservation, used_tokens)

    @property
    def pending_settlements(self) -> int:
        return self.inner.pending_settlements

    async def close(self) -> None:
        await self.inner.close()


def test_a_failed_settlement_still_audits_once_and_frees_the_slot(
    tmp_path: Path, worker: str, redis_url: str, store: redis.Redis
) -> None:
    settings = Settings(
        data_dir=tmp_path,
        workers=worker,
        worker_token=WORKER_TOKEN,
        health_interval_ms=200,
        redis_url=redis_url,
    )
    admin_tasks.migrate_database(settings)
    app = create_app(settings)
    with serving(app) as url:
        gateway = RunningGateway(url, settings, "")
        department_id, key = _department(
            gateway, "engineering", concurrent_requests=1, tokens_per_minute=10_000
        )
        scope = f"dept:{department_id}"
        tpmsum = f"{DEFAULT_PREFIX}:{scope}:tpmsum"
        traffic = app.state.traffic
        traffic.limiter = DamagedOnSettle(traffic.limiter, store, tpmsum)
        try:
            client = gateway.client(key)
            first = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=3)
            assert first.usage is not None
            (record,) = gateway.audit_records(wait_for=1)
            assert record["status_code"] == 200
            assert record["completion_tokens"] == first.usage.completion_tokens
            metrics = httpx.get(f"{url}/metrics").text
            assert "enclave_gateway_settle_failures_total 1.0" in metrics
            # The settlement failed after it had freed the slot (limit 1): the next is let in.
            assert store.zcard(f"{DEFAULT_PREFIX}:{scope}:conc") == 0
            store.delete(tpmsum)
            client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=3)
            assert len(gateway.audit_records(wait_for=2)) == 2
            assert "enclave_gateway_settle_failures_total 1.0" in httpx.get(f"{url}/metrics").text
        finally:
            _forget(store, [scope])
