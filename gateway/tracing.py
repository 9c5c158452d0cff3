"""OpenTelemetry for the gateway: a span per API request, the upstream call as its child.

One tracer provider per app (never the process-global one). With ENCLAVE_OTLP_ENDPOINT set,
spans are exported over OTLP/HTTP in batches; otherwise they go nowhere, but the
``traceparent`` header still reaches the worker so its logs carry the same trace id.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway import __version__
from gateway.settings import Settings

_PROPAGATOR = TraceContextTextMapPropagator()


def build_tracer_provider(settings: Settings) -> TracerProvider:
    resource = Resource.create({"service.name": "enclave-gateway", "service.version": __version__})
    provider = TracerProvider(resource=resource)
    if settings.otlp_endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.otlp_endpoint.rstrip("/") + "/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return provider


def incoming_context(headers: Mapping[bytes, bytes]) -> Context:
    """The caller's trace context (``traceparent``), or an empty one."""
    carrier = {
        name: headers[name.encode()].decode("latin-1")
        for name in ("traceparent", "tracestate")
        if name.encode() in headers
    }
    return _PROPAGATOR.extract(carrier)


def traceparent_of(span: trace.Span) -> dict[str, str]:
    """Headers that continue ``span``'s trace in the next hop."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier
