"""Speculative decoding (n-gram proposer) end to end on a tiny checkpoint.

Greedy output must be token-identical with and without speculation; the counters show that
proposals were made and some accepted, so the identity is not vacuous.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from inference import LLM, SamplingParams
from inference.engine.scheduler import Scheduler
from inference.grammar import Constraint
from tests.inference.checkpoints import make_checkpoint
from tests.inference.engine.speculative_case import PROMPTS, greedy, make_llm, tokens


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def plain(checkpoint: Path) -> LLM:
    return make_llm(checkpoint)


def check_no_blocks_held(llm: LLM) -> None:
    scheduler: Scheduler = llm.engine.scheduler
    assert not scheduler.running
    scheduler.block_manager.check_integrity([])


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_is_token_identical_alone_and_batched(checkpoint: Path, plain: LLM, k: int) -> None:
    spec = make_llm(checkpoint, speculative="ngram", num_speculative_tokens=k)
    expected = tokens(plain.generate(PROMPTS, greedy()))
    alone = [tokens(spec.generate([p], greedy()))[0] for p in PROMPTS]
    stats = spec.engine.spec
    assert stats is not None
    after_alone = stats.stats.num_accepted_tokens
    batched = tokens(spec.generate(PROMPTS, greedy()))
    assert alone == expected
    assert batched == expected
    assert stats.stats.num_proposed_tokens > 0
    assert after_alone > 0 and stats.stats.num_accepted_tokens > after_alone
    assert stats.stats.num_accepted_tokens < stats.stats.num_proposed_tokens  # some rejected
    assert 1.0 < stats.stats.mean_accepted_length <= k + 1
    check_no_blocks_held(spec)


def test_stops_max_tokens_eos_n_and_logprobs_end_where_plain_does(
    checkpoint: Path, plain: LLM
) -> None:
    spec = make_llm(checkpoint, speculative="ngram", num_speculative_tokens=5)
    # The plain run's output, to pick a stop string and a stop token that occur mid-run.
    base = plain.generate(PROMPTS[:3], greedy(40))
    cases: list[SamplingParams] = []
    for out in base:
        ids = out.outputs[0].token_ids
        cases.append(greedy(40, stop_token_ids=[ids[17]]))
        text = out.outputs[0].text
        if len(text) > 12:
            cases.append(greedy(40, stop=[text[8:11]]))
    cases += [
        greedy(7),  # max_tokens inside an accepted run
        SamplingParams(temperature=0, max_tokens=40),  # EOS may end it
        greedy(30, n=3, logprobs=2),
        greedy(20, min_tokens=10, repetition_penalty=1.3),
        greedy(20, speculative=False),
    ]
    for params in cases:
        want = plain.generate(PROMPTS[:3], params)
        got = spec.generate(PROMPTS[:3], params)
        for w, g in zip(want, got, strict=True):
            for wc, gc in zip(w.outputs, g.outputs, strict=True):
                assert gc.token_ids == wc.token_ids, params
                assert gc.text == wc.text and gc.finish_reason == wc.finish_reason
                assert gc.stop_reason == wc.stop_reason
                if wc.logprobs is not None:
                    assert gc.logprobs is not None and len(gc.logprobs) == len(wc.logprobs)
                    for a, b in zip(gc.logprobs, wc.logprobs, strict=True):
                        assert a.token_id == b.token_id and a.rank == b.rank
                        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
                        assert [t for t, _ in a.top] == [t for t, _ in b.top]
    assert spec.engine.spec is not None and spec.engine.spec.stats.num_accepted_tokens > 0
    check_no_blocks_held(spec)


def test_a_request_can_switch_speculation_off_in_a_mixed_batch(checkpoint: Path) -> None:
    spec = make_llm(checkpoint, speculative="ngram", num_speculative_tokens=3)
    assert spec.engine.spec is not None
    stats = spec.engine.spec.stats
    spec.generate(PROMPTS[:2], greedy(30, speculative=False))
    assert stats.num_proposed_tokens == 0
    mixed = [greedy(30, speculative=False), greedy(30)]
    spec.generate(PROMPTS[:2], mixed)
    assert stats.num_proposed_tokens > 0
    check_no_blocks_held(spec)


def test_rejected_tokens_are_rolled_back_and_never_cached(checkpoint: Path, plain: LLM) -> None:
    spec = make_llm(checkpoint, speculative="ngram", num_speculative_tokens=5, block_size=8)
    engine = spec.engine
    assert engine.spec is not None
    prompt = spec.tokenizer.encode(PROMPTS[1])
    engine.add_request("a", prompt, greedy(60))
    bm = engine.scheduler.block_manager
    while engine.has_unfinished_requests():
        engine.step()
        running = engine.scheduler.running
        bm.check_integrity(running)
        for seq in running:  # the table ends with the accepted tokens
            assert len(seq.block_table) == bm.blocks_needed(seq.num_computed_tokens)
            assert seq.num_computed_tokens == len(seq) - 1
    stats = engine.spec.stats
    assert stats.num_accepted_tokens < stats.num_proposed_tokens  # something was rejected
    full = prompt + tokens(plain.generate([prompt], greedy(60)))[0]
    # Every cached block holds verified tokens: a prefix of the finished sequence.
    assert bm.cached
    for block in bm.cached.values():
        assert block.token_ids in {tuple(full[i * 8 : (i + 1) * 8]) for i in range(len(full) // 8)}
    # A later request with the same prefix reads those blocks and decodes the same tokens.
    later = full[:50]
    got = spec.generate([later], greedy(20))[0]
    assert got.num_cached_tokens == 48
    assert tokens([got]) == tokens(plain.generate([later], greedy(20)))
    check_no_blocks_held(spec)


def test_preemption_and_prefix_caching_with_speculation(checkpoint: Path, plain: LLM) -> None:
    # A pool of 20 blocks of 8 tokens for 6 sequences of up to ~90 tokens: preemptions.
    spec = make_llm(
        checkpoint,
        speculative="ngram",
        num_speculative_tokens=4,
        block_size=8,
        kv_cache_memory_bytes=20 * 8 * 2 * 2 * 2 * 16 * 4,
        max_model_len=160,
    )
    shared = PROMPTS[0] + " " + PROMPTS[2]
    prompts = [shared + f" {i}" for i in range(6)]
    expected = tokens(plain.generate(prompts, greedy(40)))
    got = spec.generate(prompts, greedy(40))
    assert tokens(got) == expected
    assert spec.engine.scheduler.num_preemptions > 0
    assert sum(o.num_cached_tokens for o in got) > 0
    assert spec.engine.spec is not None and spec.engine.spec.stats.num_accepted_tokens > 0
    check_no_blocks_held(spec)


def test_sampling_with_speculation_is_seeded_and_bounded(checkpoint: Path) -> None:
    spec = make_llm(checkpoint, speculative="ngram", num_speculative_tokens=3)
    params = SamplingParams(
        n=2, temperature=0.7, top_k=20, max_tokens=30, seed=5, ignore_eos=True, logprobs=1
    )
    first = spec.generate(PROMPTS[:2], params)
    again = spec.generate(PROMPTS[:2], params)
    assert tokens(first) == tokens(again)
    for out in first:
        for c in out.outputs:
            assert len(c.token_ids) == 30 and c.logprobs is not None and len(c.logprobs) == 30
    check_no_blocks_held(spec)


def test_constrained_requests_do_not_speculate_beside_ones_that_do(
    checkpoint: Path, plain: LLM
) -> None:
    spec = make_llm(checkpoint, speculative="ngram", num_speculative_tokens=3)
    assert spec.engine.spec is not None
    regex = greedy(30, constraint=Constraint("regex", "(ab ){3,20}"))
    params = [greedy(30), regex, greedy(30)]
    # The constrained one sits after a verifying one, so its logits row is shifted.
    prompts = [PROMPTS[1], PROMPTS[0], PROMPTS[2]]
    got = spec.generate(prompts, params)
    assert tokens(got) == tokens(plain.generate(prompts, params))
    assert re.fullmatch("(ab ){3,20}", got[1].outputs[0].text)
    assert spec.engine.spec.stats.num_verify_steps > 0
    check_no_blocks_held(spec)


def test_no_proposals_above_the_batch_cut_off(checkpoint: Path, plain: LLM) -> None:
    spec = make_llm(
        checkpoint, speculative="ngram", num_speculative_tokens=3, speculative_max_batch=1
    )
    assert spec.engine.spec is not None
    stats = spec.engine.spec.stats
    assert tokens(spec.generate(PROMPTS[:3], greedy(30))) == tokens(
        plain.generate(PROMPTS[:3], greedy(30))
    )
    # Three ran together from start to end: nothing proposed; alone, one speculates.
    assert stats.num_proposed_tokens == 0
    spec.generate(PROMPTS[1:2], greedy(30))
    assert stats.num_proposed_tokens > 0


def test_bad_speculative_config_is_refused(checkpoint: Path) -> None:
    with pytest.raises(ValueError, match="speculative"):
        make_llm(checkpoint, speculative="draft")
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        make_llm(checkpoint, speculative="ngram", num_speculative_tokens=0)
    with pytest.raises(ValueError, match="speculative_max_batch"):
        make_llm(checkpoint, speculative="ngram", speculative_max_batch=0)
