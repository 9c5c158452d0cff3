"""Request decoding and validation: every rejection names the parameter to fix."""

from __future__ import annotations

import json

import pytest

from inference.grammar import Constraint
from inference.server.errors import APIError
from inference.server.protocol import ChatCompletionRequest, CompletionRequest
from inference.server.structured import constraint_of
from inference.server.validation import (
    check_chat,
    check_completion,
    check_prompt_fits,
    decode_request,
    resolve_max_tokens,
    to_sampling_params,
)


def completion(**fields: object) -> CompletionRequest:
    return decode_request(
        json.dumps({"model": "m", "prompt": "hi", **fields}).encode(), CompletionRequest
    )


def chat(**fields: object) -> ChatCompletionRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}
    return decode_request(json.dumps(body).encode(), ChatCompletionRequest)


def error_of(call: object, *args: object, **kwargs: object) -> APIError:
    with pytest.raises(APIError) as caught:
        call(*args, **kwargs)  # type: ignore[operator]
    return caught.value


def test_unknown_parameter_is_named() -> None:
    error = error_of(completion, frobnicate=1)
    assert error.status == 400 and error.param == "frobnicate"
    assert "Unrecognized request argument supplied: frobnicate" in error.message
    nested = error_of(chat, stream=True, stream_options={"include_usage": True, "extra": 1})
    assert nested.param == "stream_options.extra"


def test_wrong_type_names_the_field() -> None:
    error = error_of(completion, max_tokens="many")
    assert error.param == "max_tokens" and "Expected `int | null`, got `str`" in error.message


def test_malformed_json() -> None:
    error = error_of(decode_request, b'{"model": "m", "prompt": ', CompletionRequest)
    assert error.status == 400 and error.code == "invalid_json"
    body = json.loads(error.body())
    assert body["error"]["type"] == "invalid_request_error"
    assert set(body["error"]) == {"message", "type", "param", "code"}


def test_structured_output_fields_are_read_and_checked() -> None:
    schema = {"type": "object"}
    assert constraint_of(chat(response_format={"type": "text"})) is None
    assert constraint_of(chat(response_format={"type": "json_object"})) == (
        "response_format",
        Constraint("json_object"),
    )
    named = {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}}
    assert constraint_of(chat(response_format=named)) == (
        "response_format",
        Constraint("json_schema", '{"type":"object"}'),
    )
    # guided_json as JSON text is the same constraint; keys keep their order.
    ordered = '{"type": "object", "properties": {"z": {}, "a": {}}}'
    found = constraint_of(completion(guided_json=ordered))
    assert found is not None and found[1].source == '{"type":"object","properties":{"z":{},"a":{}}}'
    assert constraint_of(completion(guided_choice=["a", "b"])) == (
        "guided_choice",
        Constraint("choice", '["a", "b"]'),
    )
    bad = [
        (chat(response_format={"type": "json_object"}, guided_regex="a+"), "guided_regex"),
        (completion(guided_regex="a", guided_choice=["a"]), "guided_choice"),
        (chat(response_format={**named, "json_schema": {"name": "no spaces", "schema": schema}}),
         "response_format.json_schema.name"),
        (chat(response_format={"type": "json_schema", "json_schema": {"name": "r"}}),
         "response_format.json_schema.schema"),
        (completion(guided_json="{not json"), "guided_json"),
        (completion(guided_json=[1, 2]), "guided_json"),
        (completion(guided_choice=[]), "guided_choice"),
        (completion(guided_regex=""), "guided_regex"),
    ]  # fmt: skip
    for request, param in bad:
        error = error_of(constraint_of, request)
        assert error.status == 400 and error.param == param, (param, error.message)
    two = error_of(constraint_of, completion(guided_regex="a", guided_grammar="start: x"))
    assert "only one structured-output constraint" in two.message
    unknown = error_of(chat, response_format={"type": "xml"})
    assert unknown.param == "response_format.type" and "xml" in unknown.message


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 0}, "n"),
        ({"stream_options": {"include_usage": True}}, "stream_options"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"functions": [{"name": "f"}]}, "functions"),
    ],
)
def test_chat_rules(fields: dict[str, object], param: str) -> None:
    assert error_of(check_chat, chat(**fields)).param == param


def test_roles_and_content_parts_are_refused_as_the_document_says() -> None:
    # In the structs (an enum in GET /openapi.json), not only in chat.py: the fuzzer's
    # "valid" chats were otherwise almost all 400s for their roles.
    assert error_of(chat, messages=[{"role": "robot", "content": "x"}]).param == (
        "messages[0].role"
    )
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]
    assert error_of(chat, messages=image).param.startswith("messages[0].content")


def test_empty_messages_and_prompts_are_refused_as_the_document_says() -> None:
    # In the structs (so GET /openapi.json says minItems/minLength 1), not only in the
    # handlers: the fuzzer's "valid" requests were otherwise almost all 400s.
    assert error_of(chat, messages=[]).param == "messages"
    for prompt in ("", []):
        error = error_of(completion, prompt=prompt)
        assert error.status == 400 and error.param == "prompt"


def test_completion_rules() -> None:
    assert error_of(check_completion, completion(logprobs=21)).param == "logprobs"
    assert error_of(check_completion, completion(echo=True)).param == "echo"
    assert error_of(check_completion, completion(best_of=3)).param == "best_of"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"top_p": 1.5}, "top_p"),
        ({"temperature": -1}, "temperature"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {"999": 1}}, "logit_bias"),
        ({"logit_bias": {"3": 101}}, "logit_bias"),
        ({"min_tokens": 9}, "min_tokens"),
    ],
)
def test_out_of_range_values_name_the_field(fields: dict[str, object], param: str) -> None:
    request = completion(**fields)
    error = error_of(to_sampling_params, request, max_tokens=8, logprobs=None, vocab_size=100)
    assert error.status == 400 and error.param == param


def test_sampling_params_carry_the_request() -> None:
    request = completion(
        temperature=0.5, top_p=0.9, top_k=5, min_p=0.1, seed=7, stop="\n", logit_bias={"3": -100},
        repetition_penalty=1.2, min_tokens=2, ignore_eos=True, n=2,
    )  # fmt: skip
    params = to_sampling_params(request, max_tokens=8, logprobs=2, vocab_size=100)
    assert (params.temperature, params.top_p, params.top_k, params.min_p) == (0.5, 0.9, 5, 0.1)
    assert params.seed == 7 and params.stop == ["\n"] and params.logit_bias == {3: -100}
    assert (params.repetition_penalty, params.min_tokens, params.ignore_eos) == (1.2, 2, True)
    assert (params.n, params.max_tokens, params.logprobs) == (2, 8, 2)


def test_too_long_prompt_gives_both_numbers() -> None:
    error = error_of(check_prompt_fits, 600, 512, "prompt")
    assert error.param == "prompt" and "512" in error.message and "600" in error.message
    too_many = error_of(resolve_max_tokens, 100, 450, 512, "max_tokens")
    assert too_many.param == "max_tokens"
    assert all(str(n) in too_many.message for n in (100, 450, 512))
    assert resolve_max_tokens(None, 450, 512, "max_tokens") == 62
    assert resolve_max_tokens(62, 450, 512, "max_tokens") == 62
