"""X-Enclave-Tenant-Weight: parsed by the worker, handed to the engine, honoured by it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from inference.server.errors import APIError
from inference.server.openapi import TENANT_WEIGHT_SCHEMA
from inference.server.settings import ServerSettings
from inference.server.worker import Tenant, Worker
from tests.inference.server.conftest import API_KEY, MODEL
from tests.inference.server.engine_probe import ProbedWorker, probed_worker

BODY = {"model": MODEL, "prompt": "Hello", "max_tokens": 4, "ignore_eos": True}


@pytest.mark.parametrize(
    ("header", "weight"),
    [(None, 1.0), ("1", 1.0), ("4", 4.0), (" 250 ", 250.0), ("2.5", 2.5), ("1000", 1000.0)],
)
def test_weights_that_are_taken(header: str | None, weight: float) -> None:
    worker = Worker(ServerSettings(served_model_name=MODEL))
    assert worker.tenant_of("quality", header) == Tenant("quality", weight)


@pytest.mark.parametrize(
    "header", ["", "0", "0.5", "1001", "-1", "abc", "1e3", "nan", "inf", "1_000", "4,5", "0x10"]
)
def test_weights_that_are_refused(header: str) -> None:
    worker = Worker(ServerSettings(served_model_name=MODEL))
    with pytest.raises(APIError) as refused:
        worker.tenant_of("quality", header)
    assert refused.value.status == 400 and refused.value.param == "X-Enclave-Tenant-Weight"


def test_the_document_describes_the_weights_taken() -> None:
    # Described as a plain string, almost every fuzzed request was a 400 for its header.
    pattern = re.compile(str(TENANT_WEIGHT_SCHEMA["pattern"]))
    for taken in ("1", "4", "250", "2.5", "1000", "999.999999", "1000.0"):
        assert pattern.search(taken), taken
        assert Worker(ServerSettings(served_model_name=MODEL)).tenant_of("q", taken)
    for refused in ["", "0", "0.5", "1001", "1000.5", "-1", "abc", "1e3", "nan", "1_000"]:
        assert not pattern.search(refused), refused


@pytest.fixture(scope="module")
def worker(checkpoint: Path) -> Iterator[ProbedWorker]:
    with probed_worker(checkpoint) as running:
        yield running


def call(
    worker: ProbedWorker, tenant: str, weight: str | None, path: str = "/v1/completions"
) -> httpx.Response:
    headers = {"Authorization": f"Bearer {API_KEY}", "X-Enclave-Tenant": tenant}
    if weight is not None:
        headers["X-Enclave-Tenant-Weight"] = weight
    body: dict[str, object] = BODY
    if path == "/v1/chat/completions":
        body = {**BODY, "messages": [{"role": "user", "content": "Hi"}]}
        del body["prompt"]
    return httpx.post(f"{worker.url}{path}", json=body, headers=headers, timeout=120)


def test_the_header_reaches_the_engine(worker: ProbedWorker) -> None:
    for path in ("/v1/completions", "/v1/chat/completions"):
        for tenant, weight, expected in (("office", None, 1.0), ("quality", "4", 4.0)):
            before = set(worker.probe.added)
            assert call(worker, tenant, weight, path).status_code == 200
            (added,) = set(worker.probe.added) - before
            assert worker.probe.added[added] == (tenant, expected)


def test_a_bad_weight_is_400_and_never_reaches_the_engine(worker: ProbedWorker) -> None:
    before = len(worker.probe.added)
    for path in ("/v1/completions", "/v1/chat/completions"):
        for weight in ("0", "1001", "heavy", "nan"):
            reply = call(worker, "quality", weight, path)
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["param"] == "X-Enclave-Tenant-Weight" and error["message"]
            assert error["type"] == "invalid_request_error"
    assert len(worker.probe.added) == before


def sender(
    worker: ProbedWorker, tenant: str, weight: str, statuses: list[int]
) -> Callable[[], None]:
    def send() -> None:
        statuses.append(call(worker, tenant, weight).status_code)

    return send


@pytest.mark.parametrize(("heavy", "light"), [("4", "1"), ("1", "1")])
def test_waiting_tenants_are_admitted_in_proportion(
    worker: ProbedWorker, heavy: str, light: str
) -> None:
    # Fresh tenant names: the engine's fair-share clocks outlive one test.
    heavy_tenant, light_tenant = f"heavy-{heavy}", f"light-{heavy}"
    statuses: list[int] = []
    requests = []
    for _ in range(10):  # interleaved, so arrival order favours neither
        requests.append(sender(worker, light_tenant, light, statuses))
        requests.append(sender(worker, heavy_tenant, heavy, statuses))
    served = worker.served_in_turn(requests)
    assert statuses == [200] * 20
    first_ten = served[:10].count(heavy_tenant)
    if heavy == "4":
        # Weights 4:1 admit four of the heavy tenant for each of the light one: 8 of the
        # first 10 (7 if the window's edge falls just after a light one).
        assert first_ten >= 7, served
    else:
        assert 4 <= first_ten <= 6, served  # equal weights alternate
