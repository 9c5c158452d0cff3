"""The OpenAI API through the gateway, with the official client, to a real worker."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.gateway.traffic.conftest import MODEL, RunningGateway

CHAT = [{"role": "user", "content": "Say something about bores and tolerances."}]


def test_chat_and_completions_pass_through_with_usage(gateway: RunningGateway) -> None:
    client = gateway.client(gateway.department("quality"))
    chat = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, temperature=0)
    assert chat.choices[0].message.content
    assert chat.usage is not None and chat.usage.completion_tokens == 8
    text = client.completions.create(model=MODEL, prompt="The operator", max_tokens=5)
    assert text.usage is not None and text.usage.completion_tokens == 5
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_stream_strips_the_usage_chunk_unless_asked(gateway: RunningGateway) -> None:
    client = gateway.client(gateway.department("quality"))
    plain = list(
        client.chat.completions.create(
            model=MODEL, messages=CHAT, max_tokens=6, stream=True, temperature=0
        )
    )
    assert plain and all(chunk.usage is None for chunk in plain)
    assert all(chunk.choices for chunk in plain)  # no choices-less usage chunk
    asked = list(
        client.chat.completions.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert asked[-1].choices == [] and asked[-1].usage is not None
    assert asked[-1].usage.completion_tokens == 6
    same = "".join(c.choices[0].delta.content or "" for c in plain)
    assert same == "".join(c.choices[0].delta.content or "" for c in asked[:-1])


def test_errors_are_openai_errors(gateway: RunningGateway) -> None:
    key = gateway.department("quality")
    with pytest.raises(openai.AuthenticationError) as no_key:
        gateway.client("sk-enc-not-a-real-key").models.list()
    assert "API key" in no_key.value.message
    with pytest.raises(openai.NotFoundError) as unknown:
        gateway.client(key).chat.completions.create(model="nope", messages=CHAT)
    assert unknown.value.code == "model_not_found"
    bad = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        content=b"{not json",
        headers={"authorization": f"Bearer {key}"},
    )
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError) as worker_said:
        gateway.client(key).chat.completions.create(model=MODEL, messages=CHAT, temperature=-1)
    assert "temperature" in worker_said.value.message  # the worker's own validation, passed on


def test_a_department_limited_to_other_models_is_refused(gateway: RunningGateway) -> None:
    key = gateway.department("office", allowed_models=["other-model"])
    with pytest.raises(openai.PermissionDeniedError) as refused:
        gateway.client(key).chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2)
    assert refused.value.code == "model_not_allowed"
    assert gateway.client(key).models.list().data == []


def test_client_disconnect_cancels_the_upstream_request(gateway: RunningGateway) -> None:
    key = gateway.department("quality")

    async def leave_early() -> None:
        client = openai.AsyncOpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=CHAT,
            max_tokens=200,
            stream=True,
            extra_body={"ignore_eos": True},
        )
        async for _ in stream:
            break
        await stream.close()
        await client.close()

    asyncio.run(leave_early())
    records = gateway.audit_records(wait_for=1)
    assert records[-1]["status_code"] == 499
    assert records[-1]["reason"] == "client_disconnected"
    assert records[-1]["completion_tokens"] < 200
