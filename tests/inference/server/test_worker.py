"""The worker's own behaviour: headers, health and metrics, disconnects, overload, loading."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from transformers import AutoTokenizer

from inference.server.app import create_app
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import MODEL, metric, serving, tiny_engine

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine

LONG = {"max_tokens": 200, "ignore_eos": True, "temperature": 0.0, "stream": True}


def wait_for(condition: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_request_id_is_echoed_and_tenant_reaches_metrics(http: httpx.Client) -> None:
    reply = http.post(
        "/v1/completions",
        json={"model": MODEL, "prompt": "Hello", "max_tokens": 3, "ignore_eos": True},
        headers={"X-Request-Id": "req-123", "X-Enclave-Tenant": "quality"},
    )
    assert reply.status_code == 200 and reply.headers["x-request-id"] == "req-123"
    page = http.get("/metrics").text
    assert metric(page, "inference_generation_tokens_total", tenant="quality", model=MODEL) >= 3
    assert metric(page, "inference_time_to_first_token_seconds_count", tenant="quality") >= 1
    # An error response carries the id too.
    bad = http.post("/v1/completions", content=b"{nope", headers={"X-Request-Id": "req-9"})
    assert bad.status_code == 400 and bad.headers["x-request-id"] == "req-9"
    assert bad.json()["error"]["code"] == "invalid_json"


def test_unsupported_parameter_and_missing_key(http: httpx.Client, worker_url: str) -> None:
    body = {"model": MODEL, "prompt": "x", "suffix": "y"}
    reply = http.post("/v1/completions", json=body)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "suffix"
    anonymous = httpx.post(f"{worker_url}/v1/completions", json=body)
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["type"] == "authentication_error"
    assert httpx.get(f"{worker_url}/health").status_code == 200  # probes need no key


def test_tokenize_and_detokenize(http: httpx.Client, checkpoint: Path) -> None:
    text = "Quality manuals describe every inspection step."
    expected = AutoTokenizer.from_pretrained(str(checkpoint))(text)["input_ids"]
    tokens = http.post("/tokenize", json={"model": MODEL, "prompt": text}).json()
    assert tokens["tokens"] == expected and tokens["count"] == len(expected)
    back = http.post("/detokenize", json={"model": MODEL, "tokens": expected}).json()
    assert back["prompt"].endswith(text)


def test_ready_and_metric_names(http: httpx.Client) -> None:
    assert http.get("/ready").status_code == 200
    page = http.get("/metrics").text
    for name in (
        "inference_requests_running",
        "inference_requests_waiting",
        "inference_kv_cache_usage_ratio",
        "inference_kv_cache_capacity_tokens",
        "inference_prefix_cache_queries_total",
        "inference_prefix_cache_hits_total",
        "inference_preemptions_total",
    ):
        assert f"{name}{{" in page, name
    assert metric(page, "inference_kv_cache_capacity_tokens", model=MODEL) > 0


def test_disconnect_mid_stream_frees_the_blocks(http: httpx.Client) -> None:
    aborted_before = metric(
        http.get("/metrics").text, "inference_requests_total", finish_reason="abort"
    )
    body = {"model": MODEL, "prompt": "A long answer, please", **LONG}
    with http.stream("POST", "/v1/completions", json=body) as stream:
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data: {") and '"text":""' not in line:
                break
        page = http.get("/metrics").text
        assert metric(page, "inference_requests_running") == 1
        assert metric(page, "inference_kv_cache_usage_ratio") > 0
    # Leaving the block closed the connection mid-stream.

    def freed() -> bool:
        page = http.get("/metrics").text
        return (
            metric(page, "inference_requests_running") == 0
            and metric(page, "inference_kv_cache_usage_ratio") == 0
            and metric(page, "inference_requests_total", finish_reason="abort")
            == aborted_before + 1
        )

    wait_for(freed)
    generated = metric(http.get("/metrics").text, "inference_generation_tokens_total")
    assert generated < 10_000  # sanity: the counter is a number, and the request was cut short


def test_disconnect_while_waiting_for_a_whole_answer_aborts(http: httpx.Client) -> None:
    aborted_before = metric(
        http.get("/metrics").text, "inference_requests_total", finish_reason="abort"
    )
    # 32 samples of 240 tokens take the tiny model about a second: the client gives up first.
    body = {"model": MODEL, "prompt": "Hi", **LONG, "max_tokens": 240, "n": 32, "stream": False}
    with pytest.raises(httpx.ReadTimeout):
        http.post("/v1/completions", json=body, timeout=0.15)

    def freed() -> bool:
        page = http.get("/metrics").text
        return (
            metric(page, "inference_requests_running") == 0
            and metric(page, "inference_requests_total", finish_reason="abort")
            == aborted_before + 1
        )

    wait_for(freed)


def test_overload_gives_503_with_retry_after(checkpoint: Path) -> None:
    settings = ServerSettings(served_model_name=MODEL, max_queue=1, retry_after_s=3)
    app = create_app(tiny_engine(checkpoint, max_num_seqs=1), settings)
    with serving(app) as url, httpx.Client(base_url=url, timeout=60) as client:
        body = {"model": MODEL, "prompt": "busy", **LONG}
        streams = [client.stream("POST", "/v1/completions", json=body) for _ in range(2)]
        opened = []
        try:
            opened.append(streams[0].__enter__())
            wait_for(lambda: metric(client.get("/metrics").text, "inference_requests_running") == 1)
            opened.append(streams[1].__enter__())
            wait_for(lambda: metric(client.get("/metrics").text, "inference_requests_waiting") == 1)
            refused = client.post("/v1/completions", json={**body, "stream": False})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "3"
            assert refused.json()["error"]["code"] == "overloaded"
        finally:
            for stream in streams[: len(opened)]:
                stream.__exit__(None, None, None)


def test_ready_is_503_while_loading(checkpoint: Path) -> None:
    release = threading.Event()
    engine = tiny_engine(checkpoint)

    def load() -> LLMEngine:
        release.wait(30)
        return engine

    settings = ServerSettings(served_model_name=MODEL)
    with serving(create_app(load, settings)) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        loading = httpx.get(f"{url}/ready")
        assert loading.status_code == 503 and loading.json()["status"] == "loading"
        early = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "x"})
        assert early.status_code == 503
        release.set()
        wait_for(lambda: httpx.get(f"{url}/ready").status_code == 200)
        done = httpx.post(f"{url}/v1/completions", json={"model": MODEL, "prompt": "x"}, timeout=60)
        assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] >= 1
