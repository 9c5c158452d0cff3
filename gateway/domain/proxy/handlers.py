"""`/v1/chat/completions`, `/v1/completions`, `/v1/models` for API keys and signed-in users.

Raw ASGI handlers: the gateway passes bytes through rather than re-encoding them, watches
for the client leaving, and answers every failure with OpenAI's error body. Each request
is one `Exchange` (data), checked by `admission.py`, forwarded by `upstream.py` and ended,
exactly once, by `Accounting`, which gets the limiter and metrics from `Traffic` and the
audit writer from `GatewayState` (see traffic.py for who owns what). A chat request whose
model is one of the caller's department's assistants is rewritten to the request it stands
for before anything else looks at it (gateway/domain/assistants/resolve.py).
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING

import msgspec
import structlog
from litestar import asgi
from litestar.types import Message, Receive, Scope, Send
from opentelemetry import trace

from gateway.domain.assistants.cache import AssistantsUnavailable
from gateway.domain.assistants.resolve import HEADER, model_cards, resolve, rewrite
from gateway.domain.audit.entry import cap_body
from gateway.domain.identity.middleware import PRINCIPAL_KEY
from gateway.domain.identity.principal import CSRF_HEADER, Principal
from gateway.domain.proxy.accounting import Accounting
from gateway.domain.proxy.admission import (
    admit,
    allowed,
    authorize,
    check_allowed,
    pick_through_swap,
)
from gateway.domain.proxy.asgi_io import ClientGone, read_body, send_bytes, send_error
from gateway.domain.proxy.body import ApiRequest, parse
from gateway.domain.proxy.constraints import constraint_kind, tool_choice_kind
from gateway.domain.proxy.exchange import Ending, Exchange
from gateway.domain.proxy.openai_errors import ApiError
from gateway.domain.proxy.sse import Usage
from gateway.domain.proxy.traffic import Traffic
from gateway.domain.proxy.upstream import (
    CALL_ERRORS,
    CONNECT_ERRORS,
    PATHS,
    Call,
    forward_stream,
    forward_unary,
    upstream_error,
)
from gateway.domain.workers.pool import Upstream
from gateway.tracing import traceparent_of

if TYPE_CHECKING:
    from gateway.state import GatewayState

log = structlog.get_logger("gateway.proxy")


async def chat_completions_api(scope: Scope, receive: Receive, send: Send) -> None:
    await serve_completion(scope, receive, send, "chat.completions")


async def completions_api(scope: Scope, receive: Receive, send: Send) -> None:
    await serve_completion(scope, receive, send, "completions")


async def models_api(scope: Scope, receive: Receive, send: Send) -> None:
    headers = dict(scope["headers"])
    traffic, accounting = _services(scope)
    exchange = _exchange(scope, "models", headers)
    try:
        if _method(scope) != "GET":
            raise ApiError(405, "use GET for /v1/models", reason="bad_request")
        authorize(exchange.principal, _method(scope), _csrf(headers))
        principal = exchange.principal
        served = traffic.pool.models()
        visible = [m for m in served if allowed(principal, m)]
        cards = [{"id": m, "object": "model", "created": 0, "owned_by": "enclave"} for m in visible]
        department = principal.department
        if department is not None:
            gateway: GatewayState = scope["litestar_app"].state.gateway
            try:
                assistants = await gateway.assistants.of_department(department.id)
            except AssistantsUnavailable as exc:  # the served models are listed all the same
                log.warning("assistants_unlisted", department=department.slug, error=str(exc))
                assistants = {}
            admits = functools.partial(allowed, principal)
            cards += model_cards(assistants, department.slug, admits, served)
        body = msgspec.json.encode({"object": "list", "data": cards})
        await send_bytes(send, 200, body, {}, "application/json")
        await accounting.finish(exchange, Ending(200))
    except ApiError as error:
        await send_error(send, error)
        await accounting.finish(exchange, _refused(error))


async def refuse_unresolved(scope: Scope, send: Send, error: ApiError) -> None:
    """Answer a request whose caller could not be looked up (the database is down and the
    key was never seen), and audit it like any other refusal: one record per request."""
    _, accounting = _services(scope)
    exchange = _exchange(scope, ENDPOINTS[scope["path"]], dict(scope["headers"]))
    await send_error(send, error)
    await accounting.finish(exchange, _refused(error))


# The endpoint each of the API's paths is audited as.
ENDPOINTS = {
    "/v1/chat/completions": "chat.completions",
    "/v1/completions": "completions",
    "/v1/models": "models",
}

# The API's paths and their handlers. `entry.py` serves these ahead of Litestar's router;
# the same handlers are Litestar routes too, so the app lists them with its other routes.
API_ROUTES = {
    "/v1/chat/completions": chat_completions_api,
    "/v1/completions": completions_api,
    "/v1/models": models_api,
}
chat_completions = asgi("/v1/chat/completions", copy_scope=False)(chat_completions_api)
completions = asgi("/v1/completions", copy_scope=False)(completions_api)
models = asgi("/v1/models", copy_scope=False)(models_api)


async def serve_completion(scope: Scope, receive: Receive, send: Send, endpoint: str) -> None:
    headers = dict(scope["headers"])
    traffic, accounting = _services(scope)
    exchange = _exchange(scope, endpoint, headers)
    path = PATHS[endpoint]
    with traffic.tracing.server(f"POST {path}", headers) as span:
        span.set_attribute("enclave.request_id", exchange.request_id)
        response_started = False

        async def tracked_send(message: Message) -> None:
            nonlocal response_started
            response_started = True
            await send(message)

        try:
            if _method(scope) != "POST":
                raise ApiError(405, f"use POST for {path}", reason="bad_request")
            authorize(exchange.principal, _method(scope), _csrf(headers))
            raw = await read_body(receive, traffic.body_max_bytes, headers.get(b"content-length"))
            if exchange.keeps_bodies:
                exchange.prompt_body = cap_body(raw.decode("utf-8", "replace"), exchange.body_cap)
            request = parse(endpoint, raw)
            exchange.model = request.model
            gateway: GatewayState = scope["litestar_app"].state.gateway
            assistant = await resolve(
                gateway.assistants, traffic.pool, exchange.principal, request.model
            )
            if assistant is not None:
                exchange.assistant = assistant.slug
                exchange.assistant_version = assistant.version
                request = rewrite(request, assistant, traffic.pool)
                exchange.model = request.model
            exchange.streamed = request.stream
            kind = constraint_kind(request.body)
            if kind is not None:
                traffic.metrics.constrained.labels(kind).inc()
            tool_choice = tool_choice_kind(request.body)
            if tool_choice is not None:
                traffic.metrics.tool_requests.labels(tool_choice).inc()
            exchange.estimated_prompt_tokens = request.estimated_prompt_tokens()
            check_allowed(exchange.principal, request.model)
            upstream = await pick_through_swap(traffic.pool, request, traffic.swap_in_progress)
            exchange.reservation = await admit(
                traffic.limiter, exchange.principal, request, upstream
            )
            span.set_attribute("enclave.model", request.model)
            ending = await _forward(
                traffic, exchange, request, upstream, receive, tracked_send, span
            )
            await accounting.finish(exchange, ending)
        except ApiError as error:
            if not exchange.finished:
                if not response_started:
                    await send_error(send, _with_limits(error, exchange))
                # A worker that was never reached spent nothing: give the reservation back.
                unspent = Usage() if error.reason == "upstream_unreachable" else None
                await accounting.finish(exchange, _refused(error, unspent))
        except ClientGone:
            await accounting.finish(exchange, Ending(499, reason="client_disconnected"))
        except Exception as exc:
            # Audited here; logged once, by whoever catches it above (entry.py or Litestar).
            if not exchange.finished:
                ending = Ending(500, reason="gateway_error", error=repr(exc))
                await accounting.finish(exchange, ending)
            raise


async def _forward(
    traffic: Traffic,
    exchange: Exchange,
    request: ApiRequest,
    upstream: Upstream,
    receive: Receive,
    send: Send,
    span: trace.Span,
) -> Ending:
    """Send to ``upstream``; a worker that cannot be reached is retried once elsewhere."""
    reply_headers = _reply_headers(exchange)
    body = request.upstream_body()
    retries = 1
    while True:
        exchange.upstream = upstream.url
        span.set_attribute("enclave.upstream", upstream.url)
        with (
            traffic.pool.lease(upstream),
            traffic.tracing.client(span, "upstream", upstream.url) as child,
        ):
            headers = _upstream_headers(traffic.worker_token, exchange, child)
            call = Call(upstream.url + PATHS[request.endpoint], body, headers)
            forward = forward_stream if request.stream else forward_unary
            try:
                return await forward(
                    traffic.http, call, request, exchange.keeps_bodies, receive, send, reply_headers
                )
            except CONNECT_ERRORS as exc:
                traffic.pool.mark_failed(upstream, repr(exc))
                if retries == 0:
                    raise upstream_error(exc, upstream.url) from None
                retries -= 1
                # NoUpstream -> the ApiError of pick
                upstream = await pick_through_swap(traffic.pool, request, traffic.swap_in_progress)
            except CALL_ERRORS as exc:
                raise upstream_error(exc, upstream.url) from None


def _services(scope: Scope) -> tuple[Traffic, Accounting]:
    """The proxy's parts, and what ends a request: each from its one owner."""
    state = scope["litestar_app"].state
    traffic: Traffic = state.traffic
    gateway: GatewayState = state.gateway
    return traffic, Accounting(traffic.limiter, traffic.metrics, gateway.audit)


def _exchange(scope: Scope, endpoint: str, headers: dict[bytes, bytes]) -> Exchange:
    gateway: GatewayState = scope["litestar_app"].state.gateway
    state = scope.get("state", {})
    found = state.get(PRINCIPAL_KEY)
    principal = found if isinstance(found, Principal) else Principal()
    client = scope.get("client")
    department = principal.department
    return Exchange(
        principal,
        endpoint,
        str(state.get("request_id", "")),
        client[0] if client else "",
        headers.get(b"user-agent", b"").decode("latin-1"),
        keeps_bodies=bool(department is not None and department.audit_bodies),
        body_cap=gateway.settings.audit_body_max_bytes,
        started=time.perf_counter(),
        client_request_id=str(state.get("client_request_id", "")),
    )


def _upstream_headers(token: str, exchange: Exchange, span: trace.Span) -> dict[str, str]:
    department = exchange.principal.department
    return {
        "authorization": f"Bearer {token}",
        "content-type": "application/json",
        "x-request-id": exchange.request_id,
        "x-enclave-tenant": department.slug if department else "default",
        # The department's share of the worker's scheduler, relative to the others'.
        "x-enclave-tenant-weight": str(department.scheduling_weight if department else 1),
        **traceparent_of(span),
    }


def _refused(error: ApiError, usage: Usage | None = None) -> Ending:
    return Ending(error.status, usage, reason=error.reason, error=error.message)


def _reply_headers(exchange: Exchange) -> dict[str, str]:
    """The gateway's own headers on an answer: the limits' state, the assistant used."""
    headers = exchange.reservation.headers if exchange.reservation else {}
    return {**headers, **_assistant_header(exchange)} if exchange.assistant else headers


def _assistant_header(exchange: Exchange) -> dict[str, str]:
    return {HEADER: f"{exchange.assistant}; version={exchange.assistant_version}"}


def _with_limits(error: ApiError, exchange: Exchange) -> ApiError:
    if exchange.reservation is not None and error.status != 429:
        error.headers = {**exchange.reservation.headers, **error.headers}
    if exchange.assistant:
        error.headers = {**_assistant_header(exchange), **error.headers}
    return error


def _csrf(headers: dict[bytes, bytes]) -> str:
    return headers.get(CSRF_HEADER.encode(), b"").decode("latin-1")


def _method(scope: Scope) -> str:
    return str(scope.get("method", "GET"))
