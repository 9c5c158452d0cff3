"""The offline API's request semantics on a tiny checkpoint: n, seeds, stops, limits."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from inference import LLM, SamplingParams
from inference.kernels.attention import paged_layout
from tests.inference.checkpoints import make_checkpoint


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> LLM:
    path = make_checkpoint("llama", tmp_path_factory.mktemp("llama"))
    return LLM(
        str(path), dtype="float32", max_model_len=256, kv_cache_memory_bytes=8 << 20, progress=False
    )


def greedy(max_tokens: int = 24, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, **kw)  # type: ignore[arg-type]


def test_strings_and_token_ids_give_the_same_result(llm: LLM) -> None:
    text = "the quick brown fox"
    ids = llm.tokenizer.encode(text)
    by_text, by_ids = llm.generate([text, ids], greedy())
    assert by_text.prompt_token_ids == ids == by_ids.prompt_token_ids
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids
    decoded = llm.tokenizer.decode(by_text.outputs[0].token_ids)
    # Random weights emit random bytes: a character left incomplete at the end is held back.
    text = by_text.outputs[0].text
    assert decoded.startswith(text) and set(decoded[len(text) :]) <= {"\ufffd"}
    assert by_text.outputs[0].finish_reason == "length"
    assert len(by_text.outputs[0].token_ids) == 24


def test_seed_gives_the_same_text_whatever_else_is_in_the_batch(llm: LLM) -> None:
    seeded = SamplingParams(temperature=1.0, max_tokens=16, seed=1234, ignore_eos=True)
    alone = llm.generate(["hello there"], seeded)[0].outputs[0].token_ids
    others = [SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True)] * 3
    mixed = llm.generate(["a b c d e f", "hello there", "xyz"], [others[0], seeded, others[1]])
    assert mixed[1].outputs[0].token_ids == alone
    other_seed = SamplingParams(temperature=1.0, max_tokens=16, seed=99, ignore_eos=True)
    assert llm.generate(["hello there"], other_seed)[0].outputs[0].token_ids != alone


def test_n_samples_share_the_prompt_and_differ(llm: LLM) -> None:
    params = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=7, ignore_eos=True)
    out = llm.generate(["sampling several answers to one prompt here"], params)[0]
    assert [o.index for o in out.outputs] == [0, 1, 2]
    assert len({tuple(o.token_ids) for o in out.outputs}) == 3
    again = llm.generate(["sampling several answers to one prompt here"], params)[0]
    assert [o.token_ids for o in again.outputs] == [o.token_ids for o in out.outputs]


def test_stop_string_ends_the_text_before_it(llm: LLM) -> None:
    full = llm.generate(["stop strings"], greedy(32))[0].outputs[0]
    stop = full.text[10:13]
    assert stop and stop.strip()
    stopped = llm.generate(["stop strings"], greedy(32, stop=[stop]))[0].outputs[0]
    assert stopped.finish_reason == "stop"
    assert stopped.stop_reason == stop
    assert stopped.text == full.text[: full.text.index(stop)]
    assert stop not in stopped.text


def test_stop_token_id_and_min_tokens(llm: LLM) -> None:
    full = llm.generate(["stop tokens"], greedy(32))[0].outputs[0]
    token = full.token_ids[5]
    first = full.token_ids.index(token)
    stopped = llm.generate(["stop tokens"], greedy(32, stop_token_ids=[token]))[0].outputs[0]
    assert stopped.finish_reason == "stop" and stopped.stop_reason == token
    assert stopped.token_ids == full.token_ids[: first + 1]


def test_logprobs_are_reported_per_token(llm: LLM) -> None:
    out = llm.generate(["logprobs"], greedy(8, logprobs=3))[0].outputs[0]
    assert out.logprobs is not None and len(out.logprobs) == 8
    for token_id, lp in zip(out.token_ids, out.logprobs, strict=True):
        assert lp.token_id == token_id and lp.rank == 1  # greedy takes the top token
        assert len(lp.top) == 3 and lp.top[0][0] == token_id
        assert lp.logprob <= 0


def test_a_pool_too_small_forces_preemption_and_loses_nothing(tmp_path: Path) -> None:
    path = make_checkpoint("llama", tmp_path / "m")
    prompts = [f"request number {i} " * 3 for i in range(6)]
    roomy = LLM(
        str(path),
        dtype="float32",
        max_model_len=256,
        kv_cache_memory_bytes=8 << 20,
        progress=False,
    )
    expected = [o.outputs[0].token_ids for o in roomy.generate(prompts, greedy(40))]
    assert roomy.engine.scheduler.num_preemptions == 0
    # Twelve blocks of 16 tokens: room for about two of the six requests at full length.
    tight = LLM(
        str(path),
        dtype="float32",
        max_model_len=256,
        progress=False,
        kv_cache_memory_bytes=12 * 16 * roomy.engine.kv_bytes_per_token,
    )
    got = [o.outputs[0].token_ids for o in tight.generate(prompts, greedy(40))]
    assert tight.engine.scheduler.num_preemptions > 0
    assert got == expected


def test_too_long_prompt_is_rejected_with_both_numbers(llm: LLM) -> None:
    with pytest.raises(ValueError, match=r"300.*256|256.*300"):
        llm.generate([[5] * 300], greedy(4))
    # Nothing was left behind: the engine still serves the next request.
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate(["still fine"], greedy(2))[0].finished


def test_chat_uses_the_template(llm: LLM) -> None:
    messages = [{"role": "user", "content": "hi"}]
    out = llm.chat(messages, greedy(4))[0]
    rendered = llm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    assert out.prompt_token_ids == llm.tokenizer.encode(rendered, add_special_tokens=False)
    assert "<|im_start|>assistant" in rendered


def test_fair_share_between_tenants(tmp_path: Path) -> None:
    path = make_checkpoint("llama", tmp_path / "m")
    llm = LLM(
        str(path),
        dtype="float32",
        max_model_len=128,
        max_num_seqs=4,
        kv_cache_memory_bytes=8 << 20,
        progress=False,
    )
    engine = llm.engine
    for i in range(50):
        engine.add_request(f"a{i}", f"tenant a asks {i}", greedy(8), tenant="a")
    engine.step()  # A's burst is admitted first...
    for i in range(5):
        engine.add_request(f"b{i}", f"tenant b asks {i}", greedy(8), tenant="b")
    finished_order: list[str] = []
    while engine.has_unfinished_requests():
        finished_order.extend(o.request_id for o in engine.step() if o.finished)
    last_b = max(finished_order.index(f"b{i}") for i in range(5))
    a_after_last_b = sum(1 for r in finished_order[last_b + 1 :] if r.startswith("a"))
    # ...but B's five do not wait for A's backlog of 50 to drain.
    assert a_after_last_b >= 30


def test_prompt_logprobs_match_a_full_forward_even_with_the_prefix_cached(llm: LLM) -> None:
    prompt = llm.tokenizer.encode("prompt logprobs over a prompt longer than one block of tokens")
    llm.generate([prompt], greedy(2))  # puts the prompt's blocks in the prefix cache
    out = llm.generate([prompt], greedy(2, prompt_logprobs=2))[0]
    assert out.prompt_logprobs is not None and len(out.prompt_logprobs) == len(prompt)
    assert out.prompt_logprobs[0] is None  # the first token has nothing before it
    engine = llm.engine
    # The reference: the model's own logits over the whole prompt, in one plain pass.
    n = len(prompt)
    blocks = list(range(-(-n // 16)))
    caches = [(torch.zeros_like(k), torch.zeros_like(v)) for k, v in engine.runner.kv_caches]
    layout = paged_layout(range(n), [0, n], [n], [blocks], 16)
    meta = engine.runner.attention_backend.build_metadata(layout, torch.device("cpu"))
    with torch.inference_mode():
        hidden = engine.model(torch.tensor(prompt), torch.arange(n), caches, meta)
        expected = torch.log_softmax(engine.model.compute_logits(hidden), dim=-1)
    for pos, lp in enumerate(out.prompt_logprobs[1:], start=1):
        assert lp is not None and lp.token_id == prompt[pos]
        assert abs(lp.logprob - expected[pos - 1, prompt[pos]].item()) < 1e-4
        assert len(lp.top) == 2
