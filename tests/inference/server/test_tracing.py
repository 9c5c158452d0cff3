"""Each request's server span continues the caller's W3C trace (gateway -> worker)."""

from __future__ import annotations

from pathlib import Path

import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from inference.server.app import create_app
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import MODEL, serving, tiny_engine

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


def test_the_worker_span_continues_the_callers_trace(checkpoint: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(
        tiny_engine(checkpoint), ServerSettings(served_model_name=MODEL), tracer_provider=provider
    )
    with serving(app) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused")
        client.completions.create(
            model=MODEL,
            prompt="traced",
            max_tokens=2,
            extra_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        )
        client.completions.create(
            model=MODEL, prompt="untraced", max_tokens=2, extra_headers={"traceparent": "junk"}
        )
    spans = [s for s in exporter.get_finished_spans() if s.name == "POST /v1/completions"]
    assert len(spans) == 2
    traced, untraced = spans
    assert traced.context is not None and traced.parent is not None
    assert format(traced.context.trace_id, "032x") == TRACE_ID
    assert format(traced.parent.span_id, "016x") == PARENT_ID
    assert traced.attributes is not None and traced.attributes["http.status_code"] == 200
    # A malformed header starts a fresh trace instead of failing the request.
    assert untraced.parent is None and untraced.context is not None
    assert format(untraced.context.trace_id, "032x") != TRACE_ID
