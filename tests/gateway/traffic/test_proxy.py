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


def test_a_quota_change_applies_to_the_next_request(gateway: RunningGateway) -> None:
    key = gateway.department("quality", requests_per_minute=2)
    client = gateway.client(key)
    for _ in range(2):
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1)
    with pytest.raises(openai.RateLimitError) as refused:
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1)
    assert int(refused.value.response.headers["retry-after"]) >= 1
    assert refused.value.response.headers["x-enclave-limit"] == "requests_per_minute"
    assert refused.value.response.headers["x-ratelimit-limit-requests"] == "2"
    admin = httpx.Client(base_url=gateway.url)
    csrf = admin.post(
        "/auth/local/login", json={"email": "root@example.test", "password": gateway.admin_password}
    ).json()["csrf_token"]
    department = next(
        d for d in admin.get("/api/admin/departments/").json()["items"] if d["slug"] == "quality"
    )
    raised = admin.patch(
        f"/api/admin/departments/{department['id']}",
        json={"requests_per_minute": 3},
        headers={"x-csrf-token": csrf},
    )
    assert raised.status_code == 200, raised.text
    client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1)  # at once
    revoked = admin.get("/api/admin/keys/").json()["items"][0]["id"]
    admin.post(f"/api/admin/keys/{revoked}/revoke", headers={"x-csrf-token": csrf})
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=1)
