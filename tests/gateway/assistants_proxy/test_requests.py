"""Requests that name an assistant, through a served gateway with the official client: what
the worker is sent, what the client hears, what the audit records."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway.domain.assistants.prompt import system_message
from tests.gateway.assistants_proxy.support import (
    MODEL,
    RecordingWorker,
    ServedGateway,
    add_assistant,
    archive,
    new_version,
    recording_worker,
    served_gateway,
)
from tests.gateway.traffic.conftest import read_records

PROMPT = "You are the quality desk. Answer in one sentence."
TEMPLATE = {"type": "object", "properties": {"finding": {"type": "string"}}}
SAMPLING = {"temperature": 0.2, "max_tokens": 50}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[tuple[ServedGateway, RecordingWorker, dict[str, str]]]:
    with (
        recording_worker() as (worker_url, worker),
        served_gateway(tmp_path, [worker_url], default_department="quality") as gateway,
    ):
        keys = {
            "quality": gateway.key("quality"),
            "sales": gateway.key("sales"),
            "narrow": gateway.key("narrow", allowed_models=["another-model"]),
        }
        settings = gateway.settings
        asyncio.run(
            add_assistant(
                settings,
                "quality",
                "qa-desk",
                PROMPT,
                sampling=SAMPLING,
                response_template=TEMPLATE,
            )
        )
        asyncio.run(add_assistant(settings, "narrow", "narrow-desk", "Be brief."))
        yield gateway, worker, keys


def _client(gateway: ServedGateway, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)


def _records(gateway: ServedGateway, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 15
    while True:
        rows = asyncio.run(read_records(gateway.settings.effective_database_url))
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_a_request_naming_an_assistant_is_rewritten_to_its_current_version(
    setup: tuple[ServedGateway, RecordingWorker, dict[str, str]],
) -> None:
    gateway, worker, keys = setup
    client = _client(gateway, keys["quality"])
    system = system_message(PROMPT, TEMPLATE)
    user: Any = {"role": "user", "content": "Check batch 7."}

    unary = client.chat.completions.with_raw_response.create(
        model="qa-desk",
        messages=[user],
        temperature=0.9,
    )
    assert unary.headers["x-enclave-assistant"] == "qa-desk; version=1"
    assert unary.parse().choices[0].message.content == "ok"
    sent = worker.chats[-1]
    assert sent["model"] == MODEL  # no model of its own: the pool's default
    assert sent["messages"] == [system, user]
    assert sent["temperature"] == 0.9  # the client's own value stays
    assert sent["max_tokens"] == 50  # the assistant's default fills what was left out
    assert "top_p" not in sent
    # The response template constrains the answer (structured outputs) ...
    template_format = {
        "type": "json_schema",
        "json_schema": {"name": "qa-desk", "schema": TEMPLATE},
    }
    assert sent["response_format"] == template_format
    # ... unless the client asks for a shape of its own.
    client.chat.completions.create(
        model="qa-desk", messages=[user], extra_body={"guided_regex": "[a-z]+"}
    )
    assert "response_format" not in worker.chats[-1]
    assert worker.chats[-1]["guided_regex"] == "[a-z]+"
    own: Any = {"type": "json_object"}
    client.chat.completions.create(model="qa-desk", messages=[user], response_format=own)
    assert worker.chats[-1]["response_format"] == own

    own_system: Any = {"role": "system", "content": "Use British spelling."}
    with client.chat.completions.with_streaming_response.create(
        model="qa-desk",
        messages=[own_system, user],
        stream=True,
        max_completion_tokens=7,
    ) as streamed:
        assert streamed.headers["x-enclave-assistant"] == "qa-desk; version=1"
        chunks: Any = streamed.parse()
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "ok"
    sent = worker.chats[-1]
    assert sent["messages"] == [system, own_system, user]  # the assistant's comes first
    assert sent["temperature"] == 0.2 and sent["stream"] is True
    assert "max_tokens" not in sent and sent["max_completion_tokens"] == 7

    plain = client.chat.completions.with_raw_response.create(model=MODEL, messages=[user])
    assert "x-enclave-assistant" not in plain.headers
    assert worker.chats[-1]["messages"] == [user]

    records = _records(gateway, 5)
    details = [json.loads(r["details"]) if r["details"] else None for r in records]
    assistant = {"assistant": "qa-desk", "assistant_version": 1}
    assert details == [assistant, assistant, assistant, assistant, None]
    assert [r["model"] for r in records] == [MODEL] * 5  # the model that answered


def test_the_ui_session_keeps_via_ui_beside_the_assistant(
    setup: tuple[ServedGateway, RecordingWorker, dict[str, str]],
) -> None:
    gateway, worker, _ = setup
    with contextlib.closing(httpx.Client(base_url=gateway.url, timeout=30)) as client:
        login = client.post(
            "/auth/local/login",
            json={"email": "root@example.test", "password": gateway.admin_password},
        )
        csrf = {"x-csrf-token": login.json()["csrf_token"]}
        chat = {"model": "qa-desk", "messages": [{"role": "user", "content": "hi"}]}
        reply = client.post("/v1/chat/completions", json=chat, headers=csrf)
        assert reply.status_code == 200, reply.text
        assert reply.headers["x-enclave-assistant"] == "qa-desk; version=1"
    (record,) = _records(gateway, 1)
    assert json.loads(record["details"]) == {
        "via": "ui",
        "assistant": "qa-desk",
        "assistant_version": 1,
    }
    assert worker.chats[-1]["messages"][0]["content"].startswith(PROMPT)


def test_only_the_department_may_name_it_and_only_while_active(
    setup: tuple[ServedGateway, RecordingWorker, dict[str, str]],
) -> None:
    gateway, worker, keys = setup
    user: Any = [{"role": "user", "content": "hi"}]
    # Another department's key: the assistant does not exist for it.
    with pytest.raises(openai.NotFoundError) as missing:
        _client(gateway, keys["sales"]).chat.completions.create(model="qa-desk", messages=user)
    assert missing.value.code == "model_not_found"
    quality = _client(gateway, keys["quality"])
    # Assistants answer chat completions only.
    with pytest.raises(openai.BadRequestError) as legacy:
        quality.completions.create(model="qa-desk", prompt="hi")
    assert "assistants answer chat completions only" in legacy.value.message
    assert legacy.value.response.headers["x-enclave-assistant"] == "qa-desk; version=1"
    # The department's allow-list applies to the assistant's model.
    with pytest.raises(openai.PermissionDeniedError) as refused:
        _client(gateway, keys["narrow"]).chat.completions.create(
            model="narrow-desk",
            messages=user,
        )
    assert refused.value.code == "model_not_allowed" and MODEL in refused.value.message
    assert worker.chats == []

    # A new version applies within the cache's freshness; an archive too (then: 404).
    assistant_id = asyncio.run(_id_of(gateway, "qa-desk"))
    asyncio.run(new_version(gateway.settings, assistant_id, "Version two."))
    gateway.app.state.gateway.assistants.invalidate()  # what FRESH_S would do within 5 s
    edited = quality.chat.completions.with_raw_response.create(model="qa-desk", messages=user)
    assert edited.headers["x-enclave-assistant"] == "qa-desk; version=2"
    assert worker.chats[-1]["messages"][0]["content"].startswith("Version two.")
    asyncio.run(archive(gateway.settings, assistant_id))
    gateway.app.state.gateway.assistants.invalidate()
    with pytest.raises(openai.NotFoundError):
        quality.chat.completions.create(model="qa-desk", messages=user)


def test_models_lists_the_departments_own_assistants(
    setup: tuple[ServedGateway, RecordingWorker, dict[str, str]],
) -> None:
    gateway, _, keys = setup
    quality = {m.id: m.owned_by for m in _client(gateway, keys["quality"]).models.list()}
    assert quality == {MODEL: "enclave", "qa-desk": "quality"}
    sales = [m.id for m in _client(gateway, keys["sales"]).models.list()]
    assert sales == [MODEL]
    # "narrow" admits no model its assistant could use: neither is listed.
    assert [m.id for m in _client(gateway, keys["narrow"]).models.list()] == []


async def _id_of(gateway: ServedGateway, slug: str) -> Any:
    from sqlalchemy import select

    from gateway import admin_tasks
    from gateway.db.models.assistant import Assistant

    async with admin_tasks.transaction(gateway.settings) as db:
        return await db.scalar(select(Assistant.id).where(Assistant.slug == slug))


def test_tools_offered_to_an_assistant_replace_its_response_template(
    setup: tuple[ServedGateway, RecordingWorker, dict[str, str]],
) -> None:
    gateway, worker, keys = setup
    client = _client(gateway, keys["quality"])
    user: Any = {"role": "user", "content": "Look up batch 7."}
    tools: Any = [{"type": "function", "function": {"name": "lookup"}}]
    # The calls are the answer's shape: a json_schema response_format would forbid them.
    client.chat.completions.create(model="qa-desk", messages=[user], tools=tools)
    assert "response_format" not in worker.chats[-1] and worker.chats[-1]["tools"] == tools
    # tool_choice none: no calls, so the template constrains the answer again.
    client.chat.completions.create(
        model="qa-desk", messages=[user], tools=tools, tool_choice="none"
    )
    assert worker.chats[-1]["response_format"]["json_schema"]["schema"] == TEMPLATE
