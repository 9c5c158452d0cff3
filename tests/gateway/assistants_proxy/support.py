"""A recording fake worker, a served gateway whose app the test can reach, and assistants
written straight into the database (the admin API is another branch's)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from litestar import Litestar
from sqlalchemy import select

from gateway import admin_tasks
from gateway.app import create_app
from gateway.db.base import utc_now
from gateway.db.models.assistant import Assistant, AssistantVersion
from gateway.domain.departments.service import DepartmentService
from gateway.settings import Settings
from tests.inference.server.conftest import serving

TOKEN = "assistants-test-token"
MODEL = "fake-model"


@dataclass
class RecordingWorker:
    """A worker's API as the gateway uses it, recording what it is sent.

    Chat completions answer a fixed text (a stream when asked); prefixes are pinned by
    content (the same content is the same id) up to ``cap`` pins, then 409."""

    models: tuple[str, ...] = (MODEL,)
    cap: int = 8
    ready: bool = True
    chats: list[dict[str, Any]] = field(default_factory=list)
    pins: dict[str, str] = field(default_factory=dict)  # id -> content, pinned now
    calls: list[tuple[str, str, Any]] = field(default_factory=list)  # (method, path, body)

    def prefix_calls(self, method: str) -> list[Any]:
        return [body for m, path, body in self.calls if m == method and "prefixes" in path]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        method, path = scope["method"], scope["path"]
        body = json.loads(raw) if raw else None
        status, answer = self._answer(method, path, body)
        if isinstance(answer, bytes):  # a stream
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": answer})
            return
        payload = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    def _answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if path == "/ready":
            return (200, {"status": "ready"}) if self.ready else (503, {"status": "loading"})
        if path == "/v1/models":
            cards = [{"id": m, "object": "model", "max_model_len": 4096} for m in self.models]
            return 200, {"object": "list", "data": cards}
        self.calls.append((method, path, body))
        if path == "/v1/chat/completions":
            self.chats.append(body)
            return 200, _stream() if body.get("stream") else _completion()
        if path == "/v1/internal/prefixes" and method == "POST":
            content = body["messages"][0]["content"]
            prefix_id = "pfx-" + hashlib.sha256(content.encode()).hexdigest()[:16]
            if prefix_id not in self.pins and len(self.pins) >= self.cap:
                message = f"pinning would exceed the cap of {self.cap} prefixes"
                error = {"message": message, "code": "pin_capacity_exceeded"}
                return 409, {"error": error}
            self.pins[prefix_id] = content
            tokens = len(content.split())
            return 200, {
                "id": prefix_id,
                "object": "prefix",
                "num_tokens": tokens,
                "pinned_tokens": tokens,
                "pinned_blocks": 1,
                "cached_tokens": 0,
            }
        if path.startswith("/v1/internal/prefixes/") and method == "DELETE":
            prefix_id = path.rsplit("/", 1)[1]
            if self.pins.pop(prefix_id, None) is None:
                return 404, {"error": {"message": "no such prefix"}}
            return 200, {"id": prefix_id, "deleted": True, "unpinned_blocks": 1}
        return 404, {"error": {"message": f"no route {method} {path}"}}


_USAGE = {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}


def _completion() -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "ok"},
        "finish_reason": "stop",
    }
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [choice],
        "usage": _USAGE,
    }


def _stream() -> bytes:
    chunk = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": None}],
    }
    usage = {**chunk, "choices": [], "usage": _USAGE}
    events = [
        f"data: {json.dumps(chunk)}\n\n",
        f"data: {json.dumps(usage)}\n\n",
        "data: [DONE]\n\n",
    ]
    return "".join(events).encode()


@contextlib.contextmanager
def recording_worker(**options: Any) -> Iterator[tuple[str, RecordingWorker]]:
    worker = RecordingWorker(**options)
    with serving(worker) as url:
        yield url, worker


@dataclass
class ServedGateway:
    url: str
    settings: Settings
    app: Litestar
    admin_password: str

    def key(self, department: str, **limits: Any) -> str:
        """A department (with ``limits``) and an API key for it."""
        from tests.gateway.traffic.conftest import set_limits

        asyncio.run(admin_tasks.create_department(self.settings, department.title(), department))
        if limits:
            asyncio.run(set_limits(self.settings, department, **limits))
        return str(asyncio.run(admin_tasks.create_key(self.settings, department, "t", None, None)))


@contextlib.contextmanager
def served_gateway(
    tmp_path: Path, workers: list[str], token: str = TOKEN, **overrides: Any
) -> Iterator[ServedGateway]:
    """A gateway in front of ``workers`` (their internal token ``token``), served on loopback."""
    settings = Settings(
        data_dir=tmp_path,
        workers=",".join(workers),
        worker_token=token,
        health_interval_ms=200,
        **overrides,
    )
    admin_tasks.migrate_database(settings)
    password = asyncio.run(admin_tasks.create_admin(settings, "root@example.test"))
    app = create_app(settings)
    with serving(app) as url:
        yield ServedGateway(url, settings, app, password)


async def add_assistant(
    settings: Settings, department: str, slug: str, system_prompt: str, **version: Any
) -> uuid.UUID:
    """An assistant of ``department`` (by slug) with its version 1."""
    async with admin_tasks.transaction(settings) as db:
        owner = await DepartmentService(db).by_slug(department)
        assistant = Assistant(department_id=owner.id, slug=slug, name=slug.title())
        db.add(assistant)
        await db.flush()
        db.add(
            AssistantVersion(
                assistant_id=assistant.id, version=1, system_prompt=system_prompt, **version
            )
        )
        return assistant.id


async def new_version(settings: Settings, assistant_id: uuid.UUID, system_prompt: str) -> int:
    async with admin_tasks.transaction(settings) as db:
        assistant = await db.get_one(Assistant, assistant_id)
        current = await db.scalar(
            select(AssistantVersion)
            .where(AssistantVersion.assistant_id == assistant_id)
            .where(AssistantVersion.version == assistant.current_version)
        )
        assert current is not None
        number = assistant.current_version + 1
        db.add(
            AssistantVersion(
                assistant_id=assistant_id,
                version=number,
                system_prompt=system_prompt,
                model=current.model,
                sampling=current.sampling,
                response_template=current.response_template,
            )
        )
        assistant.current_version = number
        return number


async def archive(settings: Settings, assistant_id: uuid.UUID) -> None:
    async with admin_tasks.transaction(settings) as db:
        (await db.get_one(Assistant, assistant_id)).archived_at = utc_now()


async def prompt_tokens(settings: Settings, assistant_id: uuid.UUID) -> dict[int, int | None]:
    async with admin_tasks.transaction(settings) as db:
        rows = await db.execute(
            select(AssistantVersion.version, AssistantVersion.prompt_tokens).where(
                AssistantVersion.assistant_id == assistant_id
            )
        )
        return {version: tokens for version, tokens in rows.all()}
