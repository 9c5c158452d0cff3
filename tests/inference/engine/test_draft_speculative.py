"""Speculative decoding with a draft model, end to end on tiny checkpoints (float32).

Two drafts: a smaller random Llama with the target's tokenizer (it proposes badly, so most
proposals are rejected and rolled back) and the target itself, which in float32 proposes
exactly the target's greedy tokens, so every proposal must be accepted (a strong check that
the draft's catch-up feeds the right tokens at the right positions).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from inference import LLM, SamplingParams
from inference.engine.draft_proposer import DraftProposer
from inference.engine.llm_engine import LLMEngine
from tests.inference.checkpoints import BOS_ID, EOS_ID, PAD_ID, make_checkpoint
from tests.inference.engine.speculative_case import PROMPTS, greedy, make_llm, tokens

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint("llama", tmp_path_factory.mktemp("target"))


def small_llama(directory: Path, tokenizer_from: Path, vocab_size: int = 384) -> Path:
    """A 1-layer, 32-wide random Llama with ``tokenizer_from``'s tokenizer files."""
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=vocab_size,
        max_position_embeddings=512,
        initializer_range=0.1,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
        pad_token_id=PAD_ID,
        tie_word_embeddings=False,
    )
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(directory)
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_from / name, directory / name)
    return directory


@pytest.fixture(scope="module")
def draft(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_llama(tmp_path_factory.mktemp("draft"), target)


@pytest.fixture(scope="module")
def plain(target: Path) -> LLM:
    return make_llm(target)


def proposer_of(llm: LLM) -> DraftProposer:
    spec = llm.engine.spec
    assert spec is not None and isinstance(spec.proposer, DraftProposer)
    return spec.proposer


def check_nothing_held(llm: LLM) -> None:
    """Finished requests hold no block in either pool."""
    engine = llm.engine
    assert not engine.scheduler.running
    engine.scheduler.block_manager.check_integrity([])
    proposer = proposer_of(llm)
    assert not proposer.mirrors
    proposer.block_manager.check_integrity([])


def step_checking_both_pools(engine: LLMEngine) -> None:
    """Run the engine dry, checking both block managers after every step."""
    draft_bm = proposer_of_engine(engine).block_manager
    while engine.has_unfinished_requests():
        engine.step()
        running = engine.scheduler.running
        engine.scheduler.block_manager.check_integrity(running)
        mirrors = proposer_of_engine(engine).mirrors
        draft_bm.check_integrity([m.seq for m in mirrors.values()])
        assert set(mirrors) <= {seq.seq_id for seq in running}
        for mirror in mirrors.values():  # KV for exactly the computed tokens
            seq = mirror.seq
            assert len(seq.block_table) == draft_bm.blocks_needed(seq.num_computed_tokens)


def proposer_of_engine(engine: LLMEngine) -> DraftProposer:
    assert engine.spec is not None and isinstance(engine.spec.proposer, DraftProposer)
    return engine.spec.proposer


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_is_token_identical_with_a_small_draft_and_with_itself(
    target: Path, draft: Path, plain: LLM, k: int
) -> None:
    expected = tokens(plain.generate(PROMPTS, greedy(40)))
    for draft_path in (draft, target):
        spec = make_llm(
            target, speculative="draft", draft_model=str(draft_path), num_speculative_tokens=k
        )
        assert spec.engine.spec is not None
        stats = spec.engine.spec.stats
        alone = [tokens(spec.generate([p], greedy(40)))[0] for p in PROMPTS]
        batched = tokens(spec.generate(PROMPTS, greedy(40)))
        assert alone == expected and batched == expected
        assert stats.num_proposed_tokens > 0
        if draft_path == target:  # the target drafting for itself: all accepted
            assert stats.num_accepted_tokens == stats.num_proposed_tokens
            assert stats.mean_accepted_length >= 0.8 * (k + 1)
        else:  # a random small draft: mostly rejected
            assert stats.num_accepted_tokens < stats.num_proposed_tokens
        check_nothing_held(spec)
        spec.close()


def test_rejected_proposals_are_rolled_back_in_both_pools(
    target: Path, draft: Path, plain: LLM
) -> None:
    spec = make_llm(
        target, speculative="draft", draft_model=str(draft), num_speculative_tokens=5, block_size=8
    )
    engine = spec.engine
    prompts = [spec.tokenizer.encode(p) for p in PROMPTS[:3]]
    for index, prompt in enumerate(prompts):
        engine.add_request(str(index), prompt, greedy(60, n=2 if index == 0 else 1))
    step_checking_both_pools(engine)
    assert engine.spec is not None
    stats = engine.spec.stats
    assert stats.num_proposed_tokens > 0 and stats.num_accepted_tokens < stats.num_proposed_tokens
    # The draft's prefix cache holds only verified tokens: blocks of the prompts/outputs.
    full = [
        p + t for p, t in zip(prompts, tokens(plain.generate(prompts, greedy(60))), strict=True)
    ]
    verified = {tuple(s[i * 8 : (i + 1) * 8]) for s in full for i in range(len(s) // 8)}
    draft_bm = proposer_of(spec).block_manager
    assert draft_bm.cached
    assert all(block.token_ids in verified for block in draft_bm.cached.values())
    check_nothing_held(spec)


def test_mixed_batch_preemption_and_a_small_draft_pool(
    target: Path, draft: Path, plain: LLM
) -> None:
    # 20 target blocks of 8 tokens for 6 sequences of up to ~90 tokens: preemptions; the
    # draft's pool holds half as many, so mirrors are dropped and rebuilt.
    spec = make_llm(
        target,
        speculative="draft",
        draft_model=str(target),
        num_speculative_tokens=4,
        block_size=8,
        kv_cache_memory_bytes=20 * 8 * (512 + 256),  # bytes per token: target + half draft
        draft_kv_cache_fraction=0.5,
        max_model_len=160,
    )
    shared = PROMPTS[0] + " " + PROMPTS[2]
    prompts = [shared + f" {i}" for i in range(6)]
    params = [greedy(40, speculative=i % 2 == 0) for i in range(6)]
    off = {i for i, p in enumerate(params) if not p.speculative}
    engine = spec.engine
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params[i])
    seq_ids = {
        s.seq.seq_id: int(r.request_id) for r in engine._requests.values() for s in r.samples
    }
    outputs: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            outputs[out.request_id] = out
        # A request that does not speculate never gets a mirror in the draft's pool.
        assert not {seq_ids[s] for s in proposer_of(spec).mirrors} & off
    got = [list(outputs[str(i)].outputs[0].token_ids) for i in range(6)]
    assert got == tokens(plain.generate(prompts, params))
    assert engine.scheduler.num_preemptions > 0
    assert engine.spec is not None and engine.spec.stats.num_accepted_tokens > 0
    check_nothing_held(spec)


def test_stops_n_and_logprobs_match_plain_with_a_draft(
    target: Path, draft: Path, plain: LLM
) -> None:
    spec = make_llm(target, speculative="draft", draft_model=str(target), num_speculative_tokens=3)
    base = plain.generate(PROMPTS[:2], greedy(30))
    cases = [
        greedy(30, n=3, logprobs=2),
        greedy(7),
        greedy(30, stop_token_ids=[base[0].outputs[0].token_ids[11]]),
        SamplingParams(temperature=0, max_tokens=30),
    ]
    for params in cases:
        want = plain.generate(PROMPTS[:2], params)
        got = spec.generate(PROMPTS[:2], params)
        for w, g in zip(want, got, strict=True):
            for wc, gc in zip(w.outputs, g.outputs, strict=True):
                assert gc.token_ids == wc.token_ids and gc.finish_reason == wc.finish_reason
                if wc.logprobs is not None:
                    assert gc.logprobs is not None
                    for a, b in zip(gc.logprobs, wc.logprobs, strict=True):
                        assert a.token_id == b.token_id
                        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
    check_nothing_held(spec)


def test_a_draft_with_another_tokenizer_is_refused(target: Path, tmp_path: Path) -> None:
    # Another vocabulary size: refused before the draft's weights are read.
    other = make_checkpoint("llama", tmp_path / "other")
    config = json.loads((other / "config.json").read_text())
    small = small_llama(tmp_path / "small", other, vocab_size=config["vocab_size"])
    tok = json.loads((small / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.__getitem__)[100:102]
    vocab[first], vocab[second] = vocab[second], vocab[first]  # same size, two ids swapped
    (small / "tokenizer.json").write_text(json.dumps(tok))
    with pytest.raises(ValueError, match=r"does not share the target model's tokenizer: 2 tokens"):
        make_llm(target, speculative="draft", draft_model=str(small))
    wide = small_llama(tmp_path / "wide", target, vocab_size=400)
    with pytest.raises(ValueError, match="its output has 400 logits, the target's 384"):
        make_llm(target, speculative="draft", draft_model=str(wide))
    with pytest.raises(ValueError, match="needs draft_model"):
        make_llm(target, speculative="draft")
    with pytest.raises(ValueError, match="draft_model needs"):
        make_llm(target, draft_model=str(target))
    with pytest.raises(ValueError, match="draft_kv_cache_fraction"):
        make_llm(target, speculative="draft", draft_model=str(target), draft_kv_cache_fraction=0)
