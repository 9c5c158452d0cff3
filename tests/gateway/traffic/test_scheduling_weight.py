"""A department's scheduling_weight reaches the worker's scheduler through the gateway.

Two departments, weights 4 and 1, send ten requests each at once to a worker with one
sequence slot; the worker admits them from its fair queue, and the order it served them
in is read inside the worker (see tests/inference/server/engine_probe.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.gateway.traffic.conftest import MODEL, running_gateway
from tests.inference.server.engine_probe import ProbedWorker, probed_worker


@pytest.fixture(scope="module")
def worker(tiny_checkpoint: Path) -> Iterator[ProbedWorker]:
    with probed_worker(tiny_checkpoint) as running:
        yield running


def test_the_heavier_department_is_served_in_proportion(
    tmp_path: Path, worker: ProbedWorker
) -> None:
    with running_gateway(tmp_path, [worker.url]) as gateway:
        keys = {
            "quality": gateway.department("quality", scheduling_weight=4),
            "office": gateway.department("office"),  # the default weight, 1
        }
        statuses: list[int] = []

        def sender(slug: str) -> Callable[[], None]:
            client = gateway.client(keys[slug], timeout=120)

            def send() -> None:
                reply = client.completions.with_raw_response.create(
                    model=MODEL, prompt="Hello", max_tokens=4, extra_body={"ignore_eos": True}
                )
                statuses.append(reply.status_code)

            return send

        requests = [sender(slug) for _ in range(10) for slug in ("office", "quality")]
        served = worker.served_in_turn(requests)
    assert statuses == [200] * 20
    assert sorted(served) == ["office"] * 10 + ["quality"] * 10
    sent = {tenant: weight for tenant, weight in worker.probe.added.values()}
    assert sent["quality"] == 4.0 and sent["office"] == 1.0
    # 4:1 admits four of quality's for each of office's: 8 of the first 10 (7 when the
    # window's edge falls just after one of office's); equal weights would give 5.
    assert served[:10].count("quality") >= 7, served
