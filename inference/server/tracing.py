"""W3C trace context: each request's server span continues the caller's `traceparent`.

The tracer provider is passed in (one per app, never the process-global one); without
one, spans are no-ops. Whoever runs the worker attaches an exporter to the provider.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PROPAGATOR = TraceContextTextMapPropagator()  # stateless: safe to share


def tracer_for(provider: trace.TracerProvider | None) -> trace.Tracer:
    chosen = provider if provider is not None else trace.NoOpTracerProvider()
    return chosen.get_tracer("inference.server")


def caller_context(headers: Mapping[bytes, bytes]) -> Context:
    """The trace context of ``traceparent`` / ``tracestate``; empty if absent or malformed."""
    carrier = {
        name: headers[raw].decode("latin-1")
        for name, raw in (("traceparent", b"traceparent"), ("tracestate", b"tracestate"))
        if raw in headers
    }
    return _PROPAGATOR.extract(carrier)
