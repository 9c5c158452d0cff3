"""Prefix affinity, measured: two real workers, requests that share system prompts.

With affinity every system prompt stays on one worker, so only its first request misses
the prefix cache; routed by load alone, each prompt visits both workers and misses twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from gateway.domain.workers.pool import WorkerPool
from tests.gateway.workers.conftest import TOKEN
from tests.inference.checkpoints import CORPUS

pytestmark = pytest.mark.asyncio(loop_scope="session")
# Odd, so that round-robin alone sends each prompt's requests to both workers in turn.
PROMPTS, ROUNDS = 5, 4


@pytest.fixture(scope="module")
def worker_urls(tiny_checkpoint: Path) -> Iterator[list[str]]:
    from inference.server.app import create_app
    from inference.server.settings import ServerSettings
    from tests.inference.server.conftest import serving, tiny_engine

    settings = ServerSettings(served_model_name="tiny", api_key=TOKEN)
    with ExitStack() as stack:
        yield [
            stack.enter_context(serving(create_app(tiny_engine(tiny_checkpoint), settings)))
            for _ in range(2)
        ]


@pytest.fixture
async def pool(worker_urls: list[str]) -> AsyncIterator[WorkerPool]:
    workers = WorkerPool(worker_urls, TOKEN, interval=5.0)
    await workers.start()
    yield workers
    await workers.close()


async def run_workload(pool: WorkerPool, *, affinity: bool, tag: str) -> list[tuple[int, int]]:
    """(cached, prompt) tokens of each request, in order; prompts unique to ``tag``."""
    systems = [f"{tag} manual {i}. {CORPUS[:360]}" for i in range(PROMPTS)]
    usage: list[tuple[int, int]] = []
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(headers=headers, timeout=30) as client:
        for round_ in range(ROUNDS):
            for system in systems:
                upstream = pool.pick("tiny", system if affinity else None)
                body = {
                    "model": "tiny",
                    "messages": [
                        {"role": "system", "content": system},
                        {"role": "user", "content": f"Question {round_}?"},
                    ],
                    "max_tokens": 1,
                }
                with pool.lease(upstream):
                    answer = await client.post(f"{upstream.url}/v1/chat/completions", json=body)
                assert answer.status_code == 200, answer.text
                counts = answer.json()["usage"]
                usage.append(
                    (counts["prompt_tokens_details"]["cached_tokens"], counts["prompt_tokens"])
                )
    return usage


def hit_rate(usage: list[tuple[int, int]]) -> float:
    return sum(c for c, _ in usage) / sum(p for _, p in usage)


async def test_affinity_keeps_each_system_prompt_on_one_warm_worker(pool: WorkerPool) -> None:
    with_affinity = await run_workload(pool, affinity=True, tag="alpha")
    by_load = await run_workload(pool, affinity=False, tag="beta")
    print(
        f"prefix-cache hit rate: affinity {hit_rate(with_affinity):.1%}, "
        f"least-loaded only {hit_rate(by_load):.1%}"
    )
    assert all(u[1] > 64 for u in with_affinity)  # long enough to fill several blocks
    # Affinity: the first round misses, every later request hits its system prompt.
    assert [c == 0 for c, _ in with_affinity[:PROMPTS]] == [True] * PROMPTS
    assert all(c >= 48 for c, _ in with_affinity[PROMPTS:])
    # Load alone: the first two rounds miss (one per worker), so the rate is lower.
    assert sum(c == 0 for c, _ in by_load) == 2 * PROMPTS
    assert hit_rate(with_affinity) > hit_rate(by_load) + 0.15
