"""`/v1/chat/completions`, `/v1/completions`, `/v1/models` for API keys and signed-in users.

Raw ASGI handlers: the gateway passes bytes through rather than re-encoding them, watches
for the client leaving, and answers every failure with OpenAI's error body.
"""

from __future__ import annotations

import hmac
import time

import msgspec
from litestar import asgi
from litestar.types import Message, Receive, Scope, Send
from opentelemetry import trace

from gateway.domain.identity.middleware import PRINCIPAL_KEY
from gateway.domain.identity.principal import CSRF_HEADER, Principal
from gateway.domain.limits.scopes import scopes_for
from gateway.domain.limits.types import LimiterUnavailable, LimitExceeded, Reservation
from gateway.domain.proxy.asgi_io import ClientGone, read_body, send_bytes, send_error
from gateway.domain.proxy.body import ApiRequest, parse
from gateway.domain.proxy.exchange import Exchange
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
from gateway.domain.workers.pool import NoUpstream, Upstream
from gateway.tracing import traceparent_of


async def chat_completions_api(scope: Scope, receive: Receive, send: Send) -> None:
    await serve_completion(scope, receive, send, "chat.completions")


async def completions_api(scope: Scope, receive: Receive, send: Send) -> None:
    await serve_completion(scope, receive, send, "completions")


async def models_api(scope: Scope, receive: Receive, send: Send) -> None:
    headers = dict(scope["headers"])
    exchange = _exchange(scope, "models", headers)
    try:
        if _method(scope) != "GET":
            raise ApiError(405, "use GET for /v1/models", reason="bad_request")
        authorize(exchange.principal, scope, headers)
        visible = [m for m in exchange.traffic.pool.models() if allowed(exchange.principal, m)]
        cards = [{"id": m, "object": "model", "created": 0, "owned_by": "enclave"} for m in visible]
        body = msgspec.json.encode({"object": "list", "data": cards})
        await send_bytes(send, 200, body, {}, "application/json")
        await exchange.finish(200)
    except ApiError as error:
        await send_error(send, error)
        await exchange.finish(error.status, reason=error.reason, error=error.message)


async def refuse_unresolved(scope: Scope, send: Send, error: ApiError) -> None:
    """Answer a request whose caller could not be looked up (the database is down and the
    key was never seen), and audit it like any other refusal: one record per request."""
    exchange = _exchange(scope, ENDPOINTS[scope["path"]], dict(scope["headers"]))
    await send_error(send, error)
    await exchange.finish(error.status, reason=error.reason, error=error.message)


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
    exchange = _exchange(scope, endpoint, headers)
    traffic = exchange.traffic
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
            authorize(exchange.principal, scope, headers)
            limit = traffic.settings.api_body_max_bytes
            raw = await read_body(receive, limit, headers.get(b"content-length"))
            exchange.keep_prompt(raw)
            request = parse(endpoint, raw)
            exchange.model = request.model
            exchange.streamed = request.stream
            exchange.estimated_prompt_tokens = request.estimated_prompt_tokens()
            if not allowed(exchange.principal, request.model):
                raise ApiError(
                    403,
                    f"the model {request.model!r} is not allowed for this key or department",
                    code="model_not_allowed",
                    param="model",
                )
            upstream = pick(traffic, request)
            exchange.reservation = await admit(traffic, exchange.principal, request, upstream)
            span.set_attribute("enclave.model", request.model)
            await _forward(exchange, request, upstream, receive, tracked_send, span)
        except ApiError as error:
            if not exchange.finished:
                if not response_started:
                    await send_error(send, _with_limits(error, exchange.reservation))
                # A worker that was never reached spent nothing: give the reservation back.
                unspent = Usage() if error.reason == "upstream_unreachable" else None
                await exchange.finish(
                    error.status, unspent, reason=error.reason, error=error.message
                )
        except ClientGone:
            await exchange.finish(499, reason="client_disconnected")
        except Exception as exc:
            # Audited here; logged once, by whoever catches it above (entry.py or Litestar).
            if not exchange.finished:
                await exchange.finish(500, reason="gateway_error", error=repr(exc))
            raise


async def _forward(
    exchange: Exchange,
    request: ApiRequest,
    upstream: Upstream,
    receive: Receive,
    send: Send,
    span: trace.Span,
) -> None:
    """Send to ``upstream``; a worker that cannot be reached is retried once elsewhere."""
    traffic = exchange.traffic
    reply_headers = exchange.reservation.headers if exchange.reservation else {}
    body = request.upstream_body()
    for attempt in (1, 2):
        exchange.upstream = upstream.url
        span.set_attribute("enclave.upstream", upstream.url)
        with (
            traffic.pool.lease(upstream),
            traffic.tracing.client(span, "upstream", upstream.url) as child,
        ):
            call = Call(
                upstream.url + PATHS[request.endpoint], body, _upstream_headers(exchange, child)
            )
            forward = forward_stream if request.stream else forward_unary
            try:
                await forward(exchange, request, call, receive, send, reply_headers)
                return
            except CONNECT_ERRORS as exc:
                traffic.pool.mark_failed(upstream, repr(exc))
                if attempt == 2:
                    raise upstream_error(exc, upstream.url) from None
                upstream = pick(traffic, request)  # NoUpstream -> the ApiError of pick
            except CALL_ERRORS as exc:
                raise upstream_error(exc, upstream.url) from None


def authorize(principal: Principal, scope: Scope, headers: dict[bytes, bytes]) -> None:
    if principal.api_key is not None:
        return
    if principal.user is None or principal.session is None:
        raise ApiError(
            401,
            "a valid API key (Authorization: Bearer sk-enc-...) or a signed-in session is required",
            code="invalid_api_key",
            reason="unauthenticated",
        )
    if _method(scope) == "POST":
        sent = headers.get(CSRF_HEADER.encode(), b"")
        if not hmac.compare_digest(sent, principal.session.csrf_token.encode()):
            raise ApiError(403, "missing or wrong CSRF token", reason="csrf")
    if principal.department is None:  # no department: no limits to hold the user to
        raise ApiError(
            403,
            "you are not in a department yet: ask an admin to put you in a department",
            code="no_department",
        )


def allowed(principal: Principal, model: str) -> bool:
    """Both the key's and its department's allow-lists must admit ``model`` (None admits all)."""
    department = principal.department
    lists = [
        principal.api_key.allowed_models if principal.api_key else None,
        department.allowed_models if department else None,
    ]
    return all(names is None or model in names for names in lists)


def pick(traffic: Traffic, request: ApiRequest) -> Upstream:
    try:
        return traffic.pool.pick(request.model, request.affinity_key())
    except NoUpstream as exc:
        if not exc.known:
            raise ApiError(
                404,
                f"the model {request.model!r} does not exist; GET /v1/models lists them",
                code="model_not_found",
                param="model",
            ) from None
        raise ApiError(
            503,
            f"no healthy worker serves {request.model!r} right now; try again shortly",
            reason="no_upstream",
            headers={"retry-after": "2"},
        ) from None


async def admit(
    traffic: Traffic, principal: Principal, request: ApiRequest, upstream: Upstream
) -> Reservation:
    tokens = request.reserved_tokens(upstream.max_model_len.get(request.model))
    try:
        return await traffic.limiter.admit(
            scopes_for(principal.department, principal.api_key), tokens
        )
    except LimitExceeded as exc:
        raise ApiError(
            429,
            exc.message,
            code="rate_limit_exceeded",
            reason=f"rate_limit:{exc.reason}",
            headers=exc.headers,
        ) from None
    except LimiterUnavailable:
        raise ApiError(
            503,
            "rate limiting is unavailable (Redis cannot be reached); try again shortly",
            reason="limiter_unavailable",
            headers={"retry-after": "1"},
        ) from None


def _exchange(scope: Scope, endpoint: str, headers: dict[bytes, bytes]) -> Exchange:
    traffic: Traffic = scope["litestar_app"].state.traffic
    state = scope.get("state", {})
    principal = state.get(PRINCIPAL_KEY)
    client = scope.get("client")
    return Exchange(
        traffic,
        principal if isinstance(principal, Principal) else Principal(),
        endpoint,
        str(state.get("request_id", "")),
        client[0] if client else "",
        headers.get(b"user-agent", b"").decode("latin-1"),
        started=time.perf_counter(),
        client_request_id=str(state.get("client_request_id", "")),
    )


def _upstream_headers(exchange: Exchange, span: trace.Span) -> dict[str, str]:
    department = exchange.principal.department
    return {
        "authorization": f"Bearer {exchange.traffic.worker_token}",
        "content-type": "application/json",
        "x-request-id": exchange.request_id,
        "x-enclave-tenant": department.slug if department else "default",
        # The department's share of the worker's scheduler, relative to the others'.
        "x-enclave-tenant-weight": str(department.scheduling_weight if department else 1),
        **traceparent_of(span),
    }


def _with_limits(error: ApiError, reservation: Reservation | None) -> ApiError:
    if reservation is not None and error.status != 429:
        error.headers = {**reservation.headers, **error.headers}
    return error


def _method(scope: Scope) -> str:
    return str(scope.get("method", "GET"))
