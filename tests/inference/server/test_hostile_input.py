"""Hostile bodies and headers get a 4xx with OpenAI's error body from the worker, never a 5xx."""

from __future__ import annotations

import httpx
import pytest

from tests.inference.server.conftest import MODEL

CHAT_HEAD = b'{"model":"tiny","messages":[{"role":"user","content":"x"}],"max_tokens":2'
DEPTHS = [40, 500, 900, 1000, 1500, 5000, 100_000]


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def assert_openai_400(reply: httpx.Response, param: str | None = "") -> None:
    assert reply.status_code == 400, reply.text[:300]
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert error["type"] == "invalid_request_error"
    if param != "":
        assert error["param"] == param, error


@pytest.mark.parametrize("depth", DEPTHS)
def test_deeply_nested_bodies_are_400(http: httpx.Client, depth: int) -> None:
    bodies = {
        "/v1/completions": b'{"model":"tiny","prompt":' + nested(depth) + b"}",
        "/v1/chat/completions": CHAT_HEAD
        + b',"chat_template_kwargs":{"a":'
        + nested(depth)
        + b"}}",
        "/tokenize": b'{"prompt":' + nested(depth) + b"}",
        "/detokenize": b'{"tokens":' + nested(depth) + b"}",
    }
    for path, body in bodies.items():
        assert_openai_400(http.post(path, content=body))


def test_unclosed_objects_and_arrays_are_400(http: httpx.Client) -> None:
    for body in (b'{"a":' * 5000, b"[" * 100_000, b'{"model":"tiny","prompt":' + b"[" * 5000):
        for path in ("/v1/completions", "/v1/chat/completions", "/tokenize", "/detokenize"):
            assert_openai_400(http.post(path, content=body))


def test_chat_template_kwargs_depth_is_capped(http: httpx.Client) -> None:
    deep = CHAT_HEAD + b',"chat_template_kwargs":{"a":' + nested(40) + b"}}"
    assert_openai_400(http.post("/v1/chat/completions", content=deep), "chat_template_kwargs")
    shallow = CHAT_HEAD + b',"chat_template_kwargs":{"a":' + nested(20) + b"}}"
    assert http.post("/v1/chat/completions", content=shallow).status_code == 200


HUGE = ["1" + "0" * 30, str(2**63), str(2**64), str(-(2**63) - 1), "1e308", "1e400", "-1e400"]
FIELDS = [
    "max_tokens", "n", "seed", "temperature", "top_p", "top_k", "min_p", "min_tokens",
    "presence_penalty", "frequency_penalty", "repetition_penalty",
]  # fmt: skip


# Like vLLM, no upper bound: a huge temperature is near-uniform sampling, a huge top_k is
# every token, a huge repetition_penalty all but bans repeats.
UNBOUNDED = {"temperature", "top_k", "repetition_penalty"}


@pytest.mark.parametrize("field", [*FIELDS, "logprobs"])
def test_huge_numbers_are_400(http: httpx.Client, field: str) -> None:
    for value in HUGE:
        body = f'{{"model":"tiny","prompt":"x","max_tokens":2,"{field}":{value}}}'
        chat = CHAT_HEAD + f',"{field}":{value}}}'.encode()
        if field == "max_tokens":
            body, chat = body.replace('"max_tokens":2,', ""), chat.replace(b',"max_tokens":2', b"")
        replies = [http.post("/v1/completions", content=body.encode())]
        if field != "logprobs":
            replies.append(http.post("/v1/chat/completions", content=chat))
        for reply in replies:
            if field in UNBOUNDED and reply.status_code == 200:
                continue  # in range for these (1e400 and negatives are still refused)
            assert_openai_400(reply)
    chat = CHAT_HEAD + f',"logprobs":true,"top_logprobs":{HUGE[0]}}}'.encode()
    assert_openai_400(http.post("/v1/chat/completions", content=chat))


@pytest.mark.parametrize("value", ["[1,2]", '["a"]', "{}", '"x"'])
def test_wrong_shapes_are_400(http: httpx.Client, value: str) -> None:
    for field in ["model", *FIELDS, "stream", "stop", "logit_bias", "stream_options", "user"]:
        body = f'{{"model":"tiny","prompt":"x","max_tokens":2,"{field}":{value}}}'
        reply = http.post("/v1/completions", content=body.encode())
        if reply.status_code != 200:  # a list is a fine `stop`, a string a fine `user`
            assert_openai_400(reply)
    for path, body in (
        ("/tokenize", f'{{"prompt":{value},"model":{value}}}'),
        ("/detokenize", f'{{"tokens":[1],"model":{value}}}'),
        ("/v1/chat/completions", f'{{"model":"tiny","messages":{value}}}'),
    ):
        assert_openai_400(http.post(path, content=body.encode()))


def test_bad_token_ids_and_bytes_are_400(http: httpx.Client) -> None:
    for body in (
        b'{"model":"tiny","prompt":[99999999999999999999999],"max_tokens":2}',
        b'{"model":"tiny","prompt":[-1],"max_tokens":2}',
        b'{"model":"tiny","prompt":[[]],"max_tokens":2}',
        b'{"model":"tiny","prompt":"x","logit_bias":{"99999999999999999999999":1}}',
        b'{"model":"tiny","prompt":"x","logit_bias":{"5":1e400}}',
        b'{"model":"tiny","prompt":"\xff\xfe","max_tokens":2}',
        b"\xff\xfe\x00",
        b"",
    ):
        assert_openai_400(http.post("/v1/completions", content=body))
    for body in (b'{"tokens":[99999999999999999999999]}', b'{"tokens":[-1]}', b"\xff"):
        assert_openai_400(http.post("/detokenize", content=body))


def test_odd_header_bytes_are_not_5xx(http: httpx.Client) -> None:
    body = {"model": MODEL, "prompt": "x", "max_tokens": 2}
    for name in ("X-Enclave-Tenant", "X-Request-Id", "traceparent"):
        reply = http.post("/v1/completions", json=body, headers={name: b"\xff\xfe"})
        assert reply.status_code == 200, (name, reply.text)
    too_long = http.post("/v1/completions", json=body, headers={"X-Enclave-Tenant": "a" * 5000})
    assert_openai_400(too_long, "X-Enclave-Tenant")
