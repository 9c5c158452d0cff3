"""What operators see: the headers a worker gets, the trace, the metrics page."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from gateway.bench.fake_upstream import MODEL
from tests.gateway.traffic.conftest import WORKER_TOKEN, running_gateway
from tests.gateway.traffic.processes import fake_worker

CHAT = [{"role": "user", "content": "hello"}]
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _sample(page: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


def _finished_spans(exporter: InMemorySpanExporter, *names: str) -> dict[str, ReadableSpan]:
    """The spans by name, once all of ``names`` have ended (the server span ends after the
    response is out: accounting runs after the last byte)."""
    deadline = time.monotonic() + 10
    while True:
        spans = {span.name: span for span in exporter.get_finished_spans()}
        if all(name in spans for name in names) or time.monotonic() > deadline:
            return spans
        time.sleep(0.02)


def test_worker_headers_trace_and_metrics(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with (
        fake_worker() as (worker_url, upstream),
        running_gateway(
            tmp_path, [worker_url], app_options={"tracer_provider": provider}
        ) as gateway,
    ):
        client = gateway.client(gateway.department("quality", requests_per_minute=100))
        reply = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=CHAT,
            extra_headers={
                "x-request-id": "trace-me-1",
                "traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01",
            },
        )
        ours = reply.headers["x-request-id"]  # the gateway's id; the caller's kept apart
        assert ours.startswith("req-") and reply.headers["x-client-request-id"] == "trace-me-1"
        assert reply.headers["x-ratelimit-limit-requests"] == "100"
        head = upstream.last_head.decode().lower()
        assert f"authorization: bearer {WORKER_TOKEN}".lower() in head
        assert f"x-request-id: {ours}" in head
        assert "x-enclave-tenant: quality" in head
        assert f"traceparent: 00-{CALLER_TRACE}-" in head  # the caller's trace, continued
        spans = _finished_spans(exporter, "POST /v1/chat/completions", "upstream")
        server, child = spans["POST /v1/chat/completions"], spans["upstream"]
        assert format(server.context.trace_id, "032x") == CALLER_TRACE
        assert child.parent is not None and child.parent.span_id == server.context.span_id
        assert format(child.context.span_id, "016x") in head  # the worker's parent is the child

        refused = httpx.get(f"{gateway.url}/v1/models", headers={"authorization": "Bearer x"})
        assert refused.status_code == 401  # a refusal, counted
        deadline = time.monotonic() + 10  # a request is counted just after its last byte
        while True:
            page = httpx.get(f"{gateway.url}/metrics").text
            counted = _sample(page, "enclave_gateway_refusals_total", reason="unauthenticated")
            if counted or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        ok = _sample(
            page, "enclave_gateway_requests_total", endpoint="chat.completions", status="200"
        )
        assert ok == 1
        assert _sample(page, "enclave_gateway_refusals_total", reason="unauthenticated") == 1
        completion = _sample(
            page, "enclave_gateway_tokens_total", department="quality", kind="completion"
        )
        assert completion == 4  # what the fake worker reported
        assert _sample(page, "enclave_gateway_upstream_healthy", upstream=worker_url) == 1
