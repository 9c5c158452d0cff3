"""The scheduler driven by a fake model: the next token is a function of the sequence."""

from __future__ import annotations

import pytest

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence
from inference.sampling.params import SamplingParams


def make(num_blocks: int = 64, block_size: int = 4, **limits: int) -> Scheduler:
    config = SchedulerConfig(**{"max_model_len": 256, **limits})
    return Scheduler(config, CacheConfig(num_blocks=num_blocks, block_size=block_size))


def seq(n: int, request_id: str, max_tokens: int = 8, tenant: str = "t", **kw: object) -> Sequence:
    tokens = [(hash(request_id) + i) % 97 for i in range(n)]
    return Sequence(
        request_id=request_id,
        token_ids=tokens,
        params=SamplingParams(max_tokens=max_tokens),
        tenant=tenant,
        **kw,  # type: ignore[arg-type]
    )


def fake_next_token(s: Sequence) -> int:
    return (sum(s.token_ids) * 31 + len(s)) % 97


def step(sched: Scheduler, seqs: list[Sequence]) -> list[str]:
    """One engine step with the fake model; returns the request ids that finished."""
    out = sched.schedule()
    sched.update_after_step(out)
    done = []
    for item in out.scheduled:
        if item.sample:
            item.seq.append_token(fake_next_token(item.seq))
            if item.seq.num_output_tokens >= (item.seq.params.max_tokens or 0):
                sched.finish(item.seq, "length")
                done.append(item.seq.request_id)
    sched.block_manager.check_integrity(s for s in seqs if not s.is_finished)
    return done


def run(sched: Scheduler, seqs: list[Sequence], limit: int = 10_000) -> list[str]:
    order: list[str] = []
    for _ in range(limit):
        if not sched.has_unfinished():
            return order
        order += step(sched, seqs)
    raise AssertionError("the scheduler stopped making progress")


def test_chunked_prefill_respects_the_budget_and_shares_steps_with_decodes() -> None:
    sched = make(max_num_batched_tokens=10)
    short, long = seq(3, "short"), seq(25, "long")
    for s in (short, long):
        sched.add(s)
    first = sched.schedule()
    assert [(i.seq.request_id, i.num_new_tokens, i.sample) for i in first.scheduled] == [
        ("short", 3, True),
        ("long", 7, False),
    ]
    sched.update_after_step(first)
    short.append_token(1)
    second = sched.schedule()
    # The decode and the next prefill chunk share one step, within the budget.
    assert [(i.seq.request_id, i.start, i.num_new_tokens) for i in second.scheduled] == [
        ("short", 3, 1),
        ("long", 7, 9),
    ]
    assert second.num_tokens <= 10


def test_a_pool_too_small_preempts_and_every_request_still_finishes_the_same() -> None:
    def seqs() -> list[Sequence]:
        return [seq(6 + i, f"r{i}", max_tokens=20) for i in range(8)]

    roomy, roomy_seqs = make(num_blocks=256), seqs()
    for s in roomy_seqs:
        roomy.add(s)
    run(roomy, roomy_seqs)
    assert roomy.num_preemptions == 0

    tight, tight_seqs = make(num_blocks=16), seqs()
    for s in tight_seqs:
        tight.add(s)
    run(tight, tight_seqs)
    assert tight.num_preemptions > 0
    assert [s.token_ids for s in tight_seqs] == [s.token_ids for s in roomy_seqs]
    assert tight.block_manager.num_free_blocks == 16


def test_admission_errors_give_both_numbers() -> None:
    sched = make(num_blocks=4, block_size=4)  # 16 tokens of pool, max_model_len 256
    with pytest.raises(ValueError, match=r"300 tokens.*max_model_len 256"):
        sched.add(seq(300, "too-long"))
    with pytest.raises(ValueError, match="250 tokens and max_tokens is 10"):
        sched.add(seq(250, "too-long-with-output", max_tokens=10))
    with pytest.raises(ValueError, match=r"20 tokens.*pool's 16"):
        sched.add(seq(12, "does-not-fit", max_tokens=8))
    assert not sched.has_unfinished()


def test_abort_frees_blocks_at_once() -> None:
    sched = make(num_blocks=16)
    a, b = seq(10, "a"), seq(10, "b")
    sched.add(a)
    sched.add(b)
    sched.update_after_step(sched.schedule())
    assert sched.block_manager.num_free_blocks < 16
    assert {s.request_id for s in sched.abort("a")} == {"a"}
    assert a.finish_reason == "abort" and a.block_table == []
    sched.abort("b")
    assert sched.block_manager.num_free_blocks == 16 and not sched.has_unfinished()


def test_siblings_share_prompt_blocks_in_the_same_step() -> None:
    sched = make(num_blocks=32)
    prompt = [5] * 13
    siblings = [
        Sequence(request_id="n", token_ids=list(prompt), params=SamplingParams(), sample_index=i)
        for i in range(3)
    ]
    for s in siblings:
        sched.add(s)
    out = sched.schedule()
    assert [i.num_new_tokens for i in out.scheduled] == [13, 1, 1]
    assert siblings[1].block_table[:3] == siblings[0].block_table[:3] == siblings[2].block_table[:3]
    assert sched.block_manager.num_free_blocks == 32 - 4 - 1 - 1


def test_a_burst_from_one_tenant_does_not_starve_another() -> None:
    sched = make(num_blocks=512, max_num_seqs=2)
    a_seqs = [seq(5, f"a{i}", max_tokens=4, tenant="a") for i in range(50)]
    for s in a_seqs:
        sched.add(s)
    step(sched, a_seqs)
    b_seqs = [seq(5, f"b{i}", max_tokens=4, tenant="b") for i in range(5)]
    for s in b_seqs:
        sched.add(s)
    order = run(sched, a_seqs + b_seqs)
    last_b = max(order.index(s.request_id) for s in b_seqs)
    assert sum(1 for r in order[last_b:] if r.startswith("a")) >= 35


def test_weights_share_admissions_in_proportion() -> None:
    sched = make(num_blocks=512, max_num_seqs=1)
    both = [seq(3, f"h{i}", max_tokens=1, tenant="heavy", weight=2.0) for i in range(30)] + [
        seq(3, f"l{i}", max_tokens=1, tenant="light", weight=1.0) for i in range(30)
    ]
    for s in both:
        sched.add(s)
    order = run(sched, both)[:30]
    heavy = sum(1 for r in order if r.startswith("h"))
    assert 18 <= heavy <= 22  # about 2:1 of the first 30 admissions


def test_the_scheduler_writes_progress_and_cached_tokens() -> None:
    """The block manager returns hit counts; the scheduler records them, once per sequence,
    and resets progress whenever blocks go (finish, abort, preemption)."""
    sched = make(num_blocks=16)
    first = seq(10, "p")
    sched.add(first)
    sched.update_after_step(sched.schedule())
    assert first.num_computed_tokens == 10 and first.num_cached_tokens == 0
    sched.finish(first, "length")
    assert first.num_computed_tokens == 0 and first.finish_reason == "length"
    again = Sequence(request_id="q", token_ids=list(first.token_ids), params=SamplingParams())
    sched.add(again)
    out = sched.schedule()
    assert again.num_computed_tokens == 8 == again.num_cached_tokens  # two cached blocks
    assert out.scheduled[0].start == 8
    sched.update_after_step(out)
    sched._preempt(again)
    assert again.num_computed_tokens == 0 and again.block_table == []
    sched.update_after_step(sched.schedule())  # re-admitted: its own blocks are hits again
    assert again.num_computed_tokens == 10 and again.num_cached_tokens == 8
    sched.block_manager.check_integrity([again])
