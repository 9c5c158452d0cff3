"""The official openai client (sync, async, streaming) against a worker on a tiny model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from transformers import AutoTokenizer

from tests.inference.server.conftest import API_KEY, MAX_MODEL_LEN, MODEL

MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "system", "content": "You inspect parts."},
    {"role": "user", "content": "Measure the bore and record the value."},
]
IGNORE_EOS = {"ignore_eos": True}


@pytest.fixture(scope="module")
def client(worker_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{worker_url}/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def async_client(worker_url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=f"{worker_url}/v1", api_key=API_KEY, max_retries=0)


@pytest.fixture(scope="module")
def hf_tokenizer(checkpoint: Path) -> object:
    # transformers' own reading of the checkpoint: an independent count of prompt tokens.
    return AutoTokenizer.from_pretrained(str(checkpoint))


def test_chat_usage_matches_the_tokenizer(client: openai.OpenAI, hf_tokenizer: object) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=6, temperature=0.0, extra_body=IGNORE_EOS
    )
    encoded = hf_tokenizer.apply_chat_template(  # type: ignore[attr-defined]
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    expected = encoded["input_ids"]
    assert reply.object == "chat.completion" and reply.model == MODEL
    assert reply.id.startswith("chatcmpl-")
    choice = reply.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str)
    assert choice.finish_reason == "length"
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == len(expected)
    assert reply.usage.completion_tokens == 6
    assert reply.usage.total_tokens == len(expected) + 6
    assert reply.usage.prompt_tokens_details is not None
    assert reply.usage.prompt_tokens_details.cached_tokens is not None


def test_completion_usage_and_prefix_cache(client: openai.OpenAI, hf_tokenizer: object) -> None:
    prompt = "The operator measures the bore, records the value and signs the sheet. " * 3
    first = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=4, temperature=0.0, extra_body=IGNORE_EOS
    )
    second = client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=4, temperature=0.0, extra_body=IGNORE_EOS
    )
    assert first.usage is not None and second.usage is not None
    assert first.usage.prompt_tokens == len(hf_tokenizer(prompt)["input_ids"])  # type: ignore[operator]
    assert first.usage.completion_tokens == 4
    assert first.choices[0].text == second.choices[0].text
    # The second run finds the first one's full blocks in the prefix cache.
    cached = second.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    assert cached is not None and cached >= 16


def test_token_id_prompts_and_several_prompts(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL,
        prompt=[[5, 6, 7, 8], [9, 10]],
        max_tokens=3,
        n=2,
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert reply.usage is not None and reply.usage.prompt_tokens == 6
    assert reply.usage.completion_tokens == 12


def test_chat_stream_equals_the_whole_reply(client: openai.OpenAI) -> None:
    whole = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0.0, extra_body=IGNORE_EOS
    )
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            temperature=0.0,
            extra_body=IGNORE_EOS,
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and all(f is None for f in finishes[:-1])
    *content, usage_chunk = chunks
    assert usage_chunk.choices == [] and usage_chunk.usage == whole.usage
    assert all(c.usage is None for c in content)


async def test_async_completion_stream(async_client: openai.AsyncOpenAI) -> None:
    whole = await async_client.completions.create(
        model=MODEL,
        prompt="Quality manuals describe",
        max_tokens=10,
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    stream = await async_client.completions.create(
        model=MODEL,
        prompt="Quality manuals describe",
        max_tokens=10,
        stream=True,
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    pieces = [chunk async for chunk in stream]
    assert "".join(p.choices[0].text for p in pieces) == whole.choices[0].text
    assert pieces[-1].choices[0].finish_reason == "length"
    assert all(p.usage is None for p in pieces)  # include_usage was not asked for


def test_n_two_choices(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, n=2, max_tokens=8, temperature=1.0, seed=5,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.usage is not None and reply.usage.completion_tokens == 16
    assert reply.choices[0].message.content != reply.choices[1].message.content


def test_chat_logprobs(client: openai.OpenAI) -> None:
    reply = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=5,
        logprobs=True,
        top_logprobs=3,
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    content = reply.choices[0].logprobs.content  # type: ignore[union-attr]
    assert content is not None and len(content) == 5
    for entry in content:
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.logprob == pytest.approx(max(t.logprob for t in entry.top_logprobs), abs=1e-4)
        assert entry.logprob <= 0 and entry.bytes == list(entry.token.encode())
    # A random model emits lone bytes of multi-byte characters, which decode to U+FFFD on
    # their own: the whole-character tokens must appear in the text, in order.
    text, position = reply.choices[0].message.content or "", 0
    for entry in content:
        if "\ufffd" not in entry.token:
            position = text.index(entry.token, position) + len(entry.token)


def test_completion_logprobs(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL,
        prompt="The parts ship",
        max_tokens=4,
        logprobs=2,
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.tokens is not None
    assert len(logprobs.tokens) == len(logprobs.token_logprobs or []) == 4
    assert all(len(top) <= 2 for top in logprobs.top_logprobs or [])
    assert logprobs.text_offset is not None and logprobs.text_offset[0] == 0


def test_stop_string(client: openai.OpenAI) -> None:
    full = client.completions.create(
        model=MODEL,
        prompt="Engineers review",
        max_tokens=24,
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    text = full.choices[0].text
    stop = text[8:11]
    assert stop.strip(), f"the greedy text {text!r} is too short to pick a stop string from"
    stopped = client.completions.create(
        model=MODEL,
        prompt="Engineers review",
        max_tokens=24,
        stop=[stop],
        temperature=0.0,
        extra_body=IGNORE_EOS,
    )
    assert stopped.choices[0].text == text[: text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_same_seed_same_text(client: openai.OpenAI) -> None:
    def sample(seed: int) -> str:
        reply = client.completions.create(
            model=MODEL, prompt="A nonconformance report names", max_tokens=12,
            temperature=1.0, seed=seed, extra_body={"ignore_eos": True},
        )  # fmt: skip
        return reply.choices[0].text

    assert sample(11) == sample(11)
    assert len({sample(11), sample(12), sample(13)}) > 1


def test_sampling_extras_are_accepted(client: openai.OpenAI) -> None:
    reply = client.completions.create(
        model=MODEL, prompt="The bore", max_tokens=6, temperature=0.8, top_p=0.9, seed=1,
        presence_penalty=0.5, frequency_penalty=0.5, logit_bias={"5": -100}, user="alice",
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1, "min_tokens": 6},
    )  # fmt: skip
    assert reply.usage is not None and reply.usage.completion_tokens == 6


def test_bad_requests_name_the_field(client: openai.OpenAI) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"model": "no-such-model"}, "model"),
        ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
        ({"top_p": 2.0}, "top_p"),
        ({"extra_body": {"tools": [{"type": "function"}]}}, "tools[0]"),
        ({"extra_body": {"tool_choice": "required"}}, "tool_choice"),
    ]
    for overrides, param in cases:
        kwargs = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2, **overrides}
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(**kwargs)
        error = caught.value.body
        assert isinstance(error, dict) and error["param"] == param, error
        assert error["type"] == "invalid_request_error"


def test_too_long_prompt_gives_both_numbers(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model=MODEL, prompt=[7] * 300, max_tokens=2)
    message = caught.value.message
    assert str(MAX_MODEL_LEN) in message and "300" in message


def test_wrong_key_is_401(worker_url: str) -> None:
    bad = openai.OpenAI(base_url=f"{worker_url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_models(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [MODEL]
