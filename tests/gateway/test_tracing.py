"""Trace context without an exporter: ids only, yet the worker's traceparent continues the
caller's trace exactly as recorded spans would."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

from gateway.tracing import RequestTracing, traceparent_of

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER = f"00-{TRACE}-00f067aa0ba902b7"


def _upstream_header(tracing: RequestTracing, headers: dict[bytes, bytes]) -> dict[str, str]:
    with (
        tracing.server("POST /v1/chat/completions", headers) as span,
        tracing.client(span, "upstream", "http://w") as child,
    ):
        assert child.get_span_context().trace_id == span.get_span_context().trace_id
        assert child.get_span_context().span_id != span.get_span_context().span_id
        return traceparent_of(child)


def test_ids_only_continue_the_callers_trace_like_recorded_spans() -> None:
    for tracing in (RequestTracing(None), RequestTracing(TracerProvider())):
        sampled = _upstream_header(tracing, {b"traceparent": f"{CALLER}-01".encode()})
        version, trace_id, span_id, flags = sampled["traceparent"].split("-")
        assert (version, trace_id, flags) == ("00", TRACE, "01")
        assert span_id not in {"00f067aa0ba902b7", "0" * 16}
        with_state = _upstream_header(
            tracing, {b"traceparent": f"{CALLER}-01".encode(), b"tracestate": b"vendor=1"}
        )
        assert with_state["tracestate"] == "vendor=1"
        unsampled = _upstream_header(tracing, {b"traceparent": f"{CALLER}-00".encode()})
        assert unsampled["traceparent"].endswith("-00")
        for headers in ({}, {b"traceparent": f"00-{'0' * 32}-00f067aa0ba902b7-01".encode()}):
            fresh = _upstream_header(tracing, headers)["traceparent"].split("-")
            assert fresh[1] not in {TRACE, "0" * 32} and len(fresh[1]) == 32
            assert fresh[3] == "03"  # sampled, random trace id: as the SDK's defaults have it
