"""create_app(engine, settings): the worker's ASGI app (Litestar inside our middleware)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import msgspec
from litestar import Litestar, Request, Response, get, post
from litestar.exceptions import HTTPException
from litestar.response import Stream

from inference.server import streaming
from inference.server.chat import chat_prompt_token_ids, create_chat_completion
from inference.server.completions import create_completion
from inference.server.errors import APIError, error_body
from inference.server.generation import ClientDisconnected
from inference.server.metrics import CONTENT_TYPE
from inference.server.middleware import WorkerMiddleware
from inference.server.openapi import openapi_document
from inference.server.prefixes import prefix_routes
from inference.server.protocol import (
    DetokenizeRequest,
    DetokenizeResponse,
    ModelCard,
    ModelList,
    TokenizeRequest,
    TokenizeResponse,
)
from inference.server.settings import ServerSettings
from inference.server.tools import template_tools
from inference.server.validation import decode_request
from inference.server.worker import Worker
from inference.startup import PHASES

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

    from inference.engine.llm_engine import LLMEngine

log = logging.getLogger("inference.server")
JSON = "application/json"
TENANT_HEADER = "x-enclave-tenant"
TENANT_WEIGHT_HEADER = "x-enclave-tenant-weight"


class WorkerApp(WorkerMiddleware):
    """The ASGI app; ``worker`` is its state (ready, draining, metrics)."""

    def __init__(
        self, app: Litestar, worker: Worker, tracer_provider: TracerProvider | None = None
    ) -> None:
        super().__init__(
            app,  # type: ignore[arg-type]
            api_key=worker.settings.api_key,
            tracer_provider=tracer_provider,
        )
        self.worker = worker


def create_app(
    engine: LLMEngine | Callable[[], LLMEngine],
    settings: ServerSettings,
    *,
    tracer_provider: TracerProvider | None = None,
) -> WorkerApp:
    """Serve ``engine`` (an LLMEngine), or the one ``engine()`` loads.

    ``tracer_provider``: where each request's span goes (continuing the caller's
    ``traceparent``); none means no spans.

    A loader runs in a thread at startup, so /health answers and /ready says 503 while the
    weights load.
    """
    worker = Worker(settings)

    def json_response(body: bytes, status: int = 200) -> Response[bytes]:
        return Response(content=body, status_code=status, media_type=JSON)

    async def generation(request: Request[Any, Any, Any], create: Any) -> Response[bytes] | Stream:
        body = await request.body()
        tenant = worker.tenant_of(
            request.headers.get(TENANT_HEADER), request.headers.get(TENANT_WEIGHT_HEADER)
        )
        try:
            result = await create(worker, body, tenant=tenant, receive=request.receive)
        except ClientDisconnected:
            return json_response(error_body("client disconnected", 499), 499)
        if isinstance(result, bytes):
            return json_response(result)
        return Stream(_closing(result), media_type=streaming.MEDIA_TYPE, headers=streaming.HEADERS)

    @post("/v1/completions", status_code=200)
    async def completions(request: Request[Any, Any, Any]) -> Response[bytes] | Stream:
        return await generation(request, create_completion)

    @post("/v1/chat/completions", status_code=200)
    async def chat_completions(request: Request[Any, Any, Any]) -> Response[bytes] | Stream:
        return await generation(request, create_chat_completion)

    @get("/v1/models")
    async def models() -> Response[bytes]:
        engine = worker.engine
        name = settings.served_model_name
        cards = [
            ModelCard(
                id=name,
                created=worker.created,
                max_model_len=engine.max_model_len if engine is not None else 0,
                root=engine.config.model if engine is not None else None,
            )
        ]
        return json_response(msgspec.json.encode(ModelList(data=cards)))

    @post("/tokenize", status_code=200)
    async def tokenize(request: Request[Any, Any, Any]) -> Response[bytes]:
        engine = worker.loaded()
        body = decode_request(await request.body(), TokenizeRequest)
        worker.check_model(body.model)
        tokenizer = engine.tokenizer
        if (body.prompt is None) == (body.messages is None):
            raise APIError("give exactly one of prompt and messages", param="prompt")
        if body.messages is not None:
            token_ids = chat_prompt_token_ids(
                tokenizer,
                body.messages,
                add_generation_prompt=body.add_generation_prompt,
                template_kwargs=None,
                tools=None if body.tools is None else template_tools(body.tools),
            )
        else:
            token_ids = tokenizer.encode(
                body.prompt or "", add_special_tokens=body.add_special_tokens
            )
        payload = TokenizeResponse(len(token_ids), engine.max_model_len, token_ids)
        return json_response(msgspec.json.encode(payload))

    @post("/detokenize", status_code=200)
    async def detokenize(request: Request[Any, Any, Any]) -> Response[bytes]:
        engine = worker.loaded()
        body = decode_request(await request.body(), DetokenizeRequest)
        worker.check_model(body.model)
        vocab_size = engine.arch.vocab_size
        bad = [t for t in body.tokens if not 0 <= t < vocab_size]
        if bad:
            raise APIError(f"token id {bad[0]} is outside the vocabulary", param="tokens")
        text = engine.tokenizer.decode(body.tokens, skip_special_tokens=False)
        return json_response(msgspec.json.encode(DetokenizeResponse(text)))

    schema = openapi_document()

    @get("/openapi.json")
    async def openapi() -> Response[bytes]:
        return json_response(schema)

    @get("/health")
    async def health() -> Response[bytes]:
        return json_response(b'{"status":"ok"}')

    @get("/ready")
    async def ready() -> Response[bytes]:
        if worker.ready:
            return json_response(b'{"status":"ready"}')
        state = "draining" if worker.draining else "failed" if worker.load_error else "loading"
        return json_response(msgspec.json.encode({"status": state}), 503)

    @get("/metrics")
    async def metrics() -> Response[bytes]:
        return Response(content=worker.metrics.render(), media_type=CONTENT_TYPE)

    async def startup(_app: Litestar) -> None:
        if not callable(engine):
            worker.attach(engine)
            return
        load_engine = engine
        loop = asyncio.get_running_loop()

        def load() -> None:
            try:
                loaded = load_engine()
            except Exception as exc:
                log.exception("loading the model failed")
                worker.load_error = str(exc)
                return
            loop.call_soon_threadsafe(_attach_and_report, loaded)

        def _attach_and_report(loaded: LLMEngine) -> None:
            worker.attach(loaded)
            PHASES.log_ready()  # the start-up phases, for `bench startup`

        threading.Thread(target=load, name="model-loader", daemon=True).start()

    async def shutdown(_app: Litestar) -> None:
        if worker.async_engine is not None:
            await asyncio.to_thread(worker.async_engine.close)
            # Then the engine itself: a tensor-parallel one stops its other ranks here.
            close_engine = getattr(worker.async_engine.engine, "close", None)
            if close_engine is not None:
                await asyncio.to_thread(close_engine)

    litestar = Litestar(
        route_handlers=[
            completions,
            chat_completions,
            models,
            tokenize,
            detokenize,
            health,
            ready,
            metrics,
            openapi,
            *prefix_routes(worker, (TENANT_HEADER, TENANT_WEIGHT_HEADER), json_response),
        ],
        exception_handlers={APIError: _api_error, HTTPException: _http_error, Exception: _crash},
        on_startup=[startup],
        on_shutdown=[shutdown],
        logging_config=None,
        openapi_config=None,  # ours is /openapi.json, from the structs the handlers decode
    )
    return WorkerApp(litestar, worker, tracer_provider)


async def drain(worker: Worker, timeout_s: float) -> bool:
    """Stop admitting requests, let those in flight finish; True if all did in time."""
    worker.draining = True
    if worker.async_engine is None:
        return True
    finished = await worker.async_engine.wait_idle(timeout_s)
    if not finished:
        log.warning("drain timeout of %.1fs passed; cutting off the rest", timeout_s)
        worker.async_engine.abort_all()
        await worker.async_engine.wait_idle(5.0)
    return finished


async def _closing(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    # Litestar cancels the stream on disconnect without closing the iterator; closing it
    # here runs its cleanup at once, which aborts the engine request.
    try:
        async for chunk in chunks:
            yield chunk
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]


def _api_error(_request: Request[Any, Any, Any], exc: APIError) -> Response[bytes]:
    return Response(
        content=exc.body(), status_code=exc.status, media_type=JSON, headers=exc.headers
    )


def _http_error(_request: Request[Any, Any, Any], exc: HTTPException) -> Response[bytes]:
    body = error_body(exc.detail, exc.status_code)
    return Response(content=body, status_code=exc.status_code, media_type=JSON)


def _crash(_request: Request[Any, Any, Any], exc: Exception) -> Response[bytes]:
    log.error("unhandled error", exc_info=exc)
    return Response(
        content=error_body("internal server error", 500), status_code=500, media_type=JSON
    )
