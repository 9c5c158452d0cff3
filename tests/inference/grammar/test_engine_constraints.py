"""Constrained generation in the engine on a tiny random checkpoint: outputs validate, free
requests beside constrained ones are unchanged, and n > 1, stops, limits and preemption
all keep the constraint."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from inference import LLM, SamplingParams
from inference.grammar import Constraint
from tests.inference.checkpoints import make_checkpoint
from tests.inference.grammar.schemas import ALL, NESTED

PROMPTS = ["quality report", "the operator measures the bore", "hello", "defect found on"]


@pytest.fixture(scope="module")
def path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("grammar-llama"))


def make_llm(path: Path, **overrides: object) -> LLM:
    config: dict[str, object] = {
        "dtype": "float32",
        "max_model_len": 256,
        "kv_cache_memory_bytes": 8 << 20,
        "progress": False,
        **overrides,
    }
    return LLM(str(path), **config)


@pytest.fixture(scope="module")
def llm(path: Path) -> LLM:
    return make_llm(path)


def schema(value: object) -> Constraint:
    return Constraint("json_schema", json.dumps(value))


@pytest.mark.parametrize("name", sorted(ALL))
def test_greedy_and_sampled_outputs_validate_against_the_schema(llm: LLM, name: str) -> None:
    constraint = schema(ALL[name])
    greedy = SamplingParams(temperature=0, max_tokens=200, constraint=constraint)
    sampled = SamplingParams(temperature=1.0, seed=11, max_tokens=200, constraint=constraint)
    for params in (greedy, sampled):
        for output in llm.generate(PROMPTS, params):
            completion = output.outputs[0]
            assert completion.finish_reason == "stop", completion.text
            jsonschema.validate(json.loads(completion.text), ALL[name])


def test_n_samples_each_follow_the_schema_and_differ(llm: LLM) -> None:
    params = SamplingParams(n=4, temperature=1.0, seed=5, max_tokens=200, constraint=schema(NESTED))
    completions = llm.generate(["inspection"], params)[0].outputs
    texts = [c.text for c in completions]
    for text in texts:
        jsonschema.validate(json.loads(text), NESTED)
    assert len(set(texts)) > 1


def test_free_requests_get_the_same_tokens_beside_constrained_ones(llm: LLM) -> None:
    free = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    alone = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, free)]
    constrained = SamplingParams(temperature=0, max_tokens=60, constraint=schema(NESTED))
    mixed = llm.generate(PROMPTS + PROMPTS, [free] * 4 + [constrained] * 4)
    assert [o.outputs[0].token_ids for o in mixed[:4]] == alone
    for output in mixed[4:]:
        jsonschema.validate(json.loads(output.outputs[0].text), NESTED)
    # And the constraint did change what those rows drew.
    assert [o.outputs[0].token_ids[:24] for o in mixed[4:]] != alone


def test_regex_choice_and_grammar(llm: LLM) -> None:
    regex = SamplingParams(
        temperature=1.0, seed=1, max_tokens=40, constraint=Constraint("regex", r"[A-Z]{2}-[0-9]{3}")
    )
    for output in llm.generate(PROMPTS, regex):
        assert re.fullmatch(r"[A-Z]{2}-[0-9]{3}", output.outputs[0].text)
        assert output.outputs[0].finish_reason == "stop"
    choices = ["accept", "rework", "scrap"]
    choice = SamplingParams(
        temperature=1.0, seed=2, max_tokens=20, constraint=Constraint("choice", json.dumps(choices))
    )
    assert {o.outputs[0].text for o in llm.generate(PROMPTS, choice)} <= set(choices)
    lark = 'start: "part " ID " is " STATUS\nID: /[0-9]{3}/\nSTATUS: "ok" | "bad"'
    grammar = SamplingParams(
        temperature=1.0, seed=3, max_tokens=40, constraint=Constraint("grammar", lark)
    )
    for output in llm.generate(PROMPTS, grammar):
        assert re.fullmatch(r"part [0-9]{3} is (ok|bad)", output.outputs[0].text)


def test_max_tokens_cuts_with_length_and_stop_strings_still_apply(llm: LLM) -> None:
    cut = SamplingParams(temperature=0, max_tokens=3, constraint=schema(NESTED))
    completion = llm.generate(["cut short"], cut)[0].outputs[0]
    assert completion.finish_reason == "length" and len(completion.token_ids) == 3
    stopped = SamplingParams(
        temperature=0, max_tokens=40, stop=["x"], constraint=Constraint("regex", r"ab{3}xc{3}")
    )
    completion = llm.generate(["stop here"], stopped)[0].outputs[0]
    assert completion.text == "abbb" and completion.stop_reason == "x"


def test_a_preempted_constrained_request_resumes_where_its_grammar_was(path: Path) -> None:
    prompts = [f"request number {i} " * 3 for i in range(6)]
    params = SamplingParams(temperature=0, max_tokens=120, constraint=schema(NESTED))
    roomy = make_llm(path)
    expected = [o.outputs[0].text for o in roomy.generate(prompts, params)]
    tight = make_llm(path, kv_cache_memory_bytes=12 * 16 * roomy.engine.kv_bytes_per_token)
    got = [o.outputs[0].text for o in tight.generate(prompts, params)]
    assert tight.engine.scheduler.num_preemptions > 0
    assert got == expected
    for text in got:
        jsonschema.validate(json.loads(text), NESTED)


def test_bad_constraints_are_refused_before_anything_is_queued(llm: LLM) -> None:
    bad = [
        schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
        schema({"not": {"type": "string"}}),
        Constraint("regex", "[a-"),
        Constraint("grammar", "start: undefined_rule"),
    ]
    for constraint in bad:
        with pytest.raises(ValueError):
            llm.generate(["x"], SamplingParams(max_tokens=4, constraint=constraint))
    assert not llm.engine.has_unfinished_requests()


def test_a_grammar_that_can_never_complete_is_refused(llm: LLM) -> None:
    # llguidance compiles it, then its parser fails on the first token: the compiler's
    # probe finds that before the request is queued.
    endless = Constraint("grammar", 'start: "ab" start')
    with pytest.raises(ValueError, match="Too many items"):
        llm.generate(["loop"], SamplingParams(max_tokens=6, constraint=endless))


def test_a_grammar_failing_past_the_probe_cuts_its_sample_off(llm: LLM) -> None:
    # Twenty free letters (more than the probe walks) before the endless part.
    late = Constraint("grammar", 'start: LETTERS tail\nLETTERS: /[a-z]{20}/\ntail: "y" tail')
    params = SamplingParams(temperature=0, max_tokens=40, constraint=late)
    completion = llm.generate(["late"], params)[0].outputs[0]
    assert completion.finish_reason == "abort"
    assert str(completion.stop_reason).startswith("grammar error: ")
    assert re.fullmatch(r"[a-z]{1,20}y*", completion.text)
