"""OpenTelemetry for the gateway: a span per API request, the upstream call as its child.

One tracer provider per app (never the process-global one). With ENCLAVE_OTLP_ENDPOINT set
(or a provider handed to the app), spans are recorded and exported. Without either nothing
would ever read them, so none are recorded: a request gets only the ids its spans would
have had, and the ``traceparent`` header still reaches the worker, continuing the caller's
trace, so the worker's logs carry the same trace id. Two SDK spans cost a request about
0.1 ms of the gateway's CPU; the ids alone, a few microseconds.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from contextlib import AbstractContextManager

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.settings import Settings

_PROPAGATOR = TraceContextTextMapPropagator()
# What the SDK's default sampler and id generator give: sampled, and (W3C level 2) the
# trace id is random; a caller's trace keeps the caller's bits.
_FLAGS = trace.TraceFlags.SAMPLED | trace.TraceFlags.RANDOM_TRACE_ID
_NEW_TRACE = trace.TraceFlags(_FLAGS)


def build_tracer_provider(settings: Settings) -> TracerProvider | None:
    """The exporting provider, or None when no OTLP endpoint is configured."""
    if not settings.otlp_endpoint:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create({"service.name": "enclave-gateway", "service.version": __version__})
    provider = TracerProvider(resource=resource)
    endpoint = settings.otlp_endpoint.rstrip("/") + "/v1/traces"
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


class RequestTracing:
    """Starts an API request's span and its upstream child: SDK spans with a provider,
    bare ids (non-recording spans) without one. Either works as a context manager."""

    def __init__(self, provider: TracerProvider | None) -> None:
        self.tracer = provider.get_tracer("gateway") if provider is not None else None

    def server(
        self, name: str, headers: Mapping[bytes, bytes]
    ) -> AbstractContextManager[trace.Span]:
        if self.tracer is not None:
            return self.tracer.start_as_current_span(
                name, context=incoming_context(headers), kind=trace.SpanKind.SERVER
            )
        parent = (
            trace.get_current_span(incoming_context(headers)).get_span_context()
            if b"traceparent" in headers
            else trace.INVALID_SPAN_CONTEXT
        )
        if parent.is_valid:  # continue the caller's trace, as the SDK's default sampler does
            flags = trace.TraceFlags(parent.trace_flags & _FLAGS)
            return _span(parent.trace_id, flags, parent.trace_state)
        return _span(_new_id(128), _NEW_TRACE, None)

    def client(self, parent: trace.Span, name: str, url: str) -> AbstractContextManager[trace.Span]:
        if self.tracer is not None:
            return self.tracer.start_as_current_span(
                name,
                context=trace.set_span_in_context(parent),
                kind=trace.SpanKind.CLIENT,
                attributes={"server.address": url},
            )
        context = parent.get_span_context()
        return _span(context.trace_id, context.trace_flags, context.trace_state)


def _span(
    trace_id: int, flags: trace.TraceFlags, state: trace.TraceState | None
) -> trace.NonRecordingSpan:
    context = trace.SpanContext(trace_id, _new_id(64), False, flags, state)
    return trace.NonRecordingSpan(context)


def _new_id(bits: int) -> int:
    while not (value := random.getrandbits(bits)):  # zero is the invalid id
        pass
    return value


def incoming_context(headers: Mapping[bytes, bytes]) -> Context:
    """The caller's trace context (``traceparent``), or an empty one."""
    carrier = {
        name: headers[name.encode()].decode("latin-1")
        for name in ("traceparent", "tracestate")
        if name.encode() in headers
    }
    return _PROPAGATOR.extract(carrier)


def traceparent_of(span: trace.Span) -> dict[str, str]:
    """Headers that continue ``span``'s trace in the next hop (W3C trace context)."""
    context = span.get_span_context()
    ids = f"{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    headers = {"traceparent": f"00-{ids}"}
    if context.trace_state:
        headers["tracestate"] = context.trace_state.to_header()
    return headers
