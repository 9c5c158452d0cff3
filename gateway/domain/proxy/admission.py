"""What a request must pass before it reaches a worker: who may call, which model, which
worker, and the limiter's admission. Each refusal is an `ApiError` in OpenAI's shape."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.domain.identity.guards import csrf_ok
from gateway.domain.identity.principal import Principal
from gateway.domain.limits.scopes import scopes_for
from gateway.domain.limits.types import Limiter, LimiterUnavailable, LimitExceeded, Reservation
from gateway.domain.proxy.body import ApiRequest
from gateway.domain.proxy.openai_errors import ApiError
from gateway.domain.workers.pool import NoUpstream, Upstream, WorkerPool

LIMIT_HEADER = "x-enclave-limit"


def authorize(principal: Principal, method: str, sent_csrf: str) -> None:
    """An API key, or a signed-in user in a department whose writes echo the CSRF token."""
    if principal.api_key is not None:
        return
    if principal.user is None or principal.session is None:
        raise ApiError(
            401,
            "a valid API key (Authorization: Bearer sk-enc-...) or a signed-in session is required",
            code="invalid_api_key",
            reason="unauthenticated",
        )
    if not csrf_ok(principal.session, method, sent_csrf):
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


def check_allowed(principal: Principal, model: str) -> None:
    if not allowed(principal, model):
        raise ApiError(
            403,
            f"the model {model!r} is not allowed for this key or department",
            code="model_not_allowed",
            param="model",
        )


def pick(pool: WorkerPool, request: ApiRequest) -> Upstream:
    try:
        return pool.pick(request.model, request.affinity_key())
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


# How long a request may wait for a worker while a one-at-a-time weight swap has none
# (workers/swap.py): a small model is back in seconds, a large one in a minute or two.
SWAP_GAP_WAIT_S = 180.0


async def pick_through_swap(
    pool: WorkerPool,
    request: ApiRequest,
    swapping: Callable[[], bool],
    wait_s: float = SWAP_GAP_WAIT_S,
) -> Upstream:
    """`pick`, except that while ``swapping()`` (a weight swap of the supervised worker is
    under way), or while a worker for the model is held for warming, a request for a model
    the pool knows but no worker serves right now (the gap of a one-at-a-time swap) waits
    for the new worker, up to ``wait_s``, instead of a 503.
    When the swap ends it is answered as any other: by the new worker, or 404 if the swap
    renamed the model away."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        try:
            return pool.pick(request.model, request.affinity_key())
        except NoUpstream as exc:
            coming = swapping() or _held_for_warming(pool, request)
            if not (exc.known and coming) or loop.time() >= deadline:
                return pick(pool, request)  # the 404 or 503 it raises
        await asyncio.sleep(0.1)


def _held_for_warming(pool: WorkerPool, request: ApiRequest) -> bool:
    """A worker serving the model is up but held out of routing while the prefix warmer
    pins the assistants on it (at most the warmer's pin timeout): the end of a swap, a
    start or a restart. It takes requests in a moment."""
    try:
        pool.pick(request.model, None, warming_too=True)
    except NoUpstream:
        return False
    return True


async def admit(
    limiter: Limiter, principal: Principal, request: ApiRequest, upstream: Upstream
) -> Reservation:
    tokens = request.reserved_tokens(upstream.max_model_len.get(request.model))
    try:
        return await limiter.admit(scopes_for(principal.department, principal.api_key), tokens)
    except LimitExceeded as exc:
        raise ApiError(
            429,
            exc.message,
            code="rate_limit_exceeded",
            reason=f"rate_limit:{exc.reason}",
            # Which limit refused, for the web app to say in words (OpenAI's body has no field).
            headers={**exc.headers, LIMIT_HEADER: exc.reason},
        ) from None
    except LimiterUnavailable:
        raise ApiError(
            503,
            "rate limiting is unavailable (Redis cannot be reached); try again shortly",
            reason="limiter_unavailable",
            headers={"retry-after": "1"},
        ) from None
