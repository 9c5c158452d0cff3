"""The time-budget policy's decisions, on a fixed cost model (no clock is read)."""

from __future__ import annotations

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.scheduler import Scheduler
from inference.engine.scheduler_output import SchedulerOutput
from inference.engine.sequence import Sequence
from inference.engine.step_cost import StepCostModel, step_features
from inference.sampling.params import SamplingParams

BLOCK = 16
MANUAL = [(7 * i + 3) % 89 for i in range(40 * BLOCK)]  # a 640-token shared prefix
# The prior alone (nothing observed): 20 ms a step, 0.4 ms a row, 0.1 ms per 1,000 pairs.
COST = (20.0, 0.4, 0.1)


def make(budget_ms: float | None = 100.0, **limits: int) -> Scheduler:
    config = SchedulerConfig(
        **{"max_model_len": 4096, "step_time_budget_ms": budget_ms, **limits}  # type: ignore[arg-type]
    )
    sched = Scheduler(config, CacheConfig(num_blocks=2048, block_size=BLOCK))
    sched.step_cost = StepCostModel(prior_ms=COST)
    return sched


def request(tokens: list[int], request_id: str, tenant: str, max_tokens: int = 4) -> Sequence:
    return Sequence(
        request_id=request_id,
        token_ids=list(tokens),
        params=SamplingParams(max_tokens=max_tokens),
        tenant=tenant,
    )


def long_prompt(k: int, n: int = 1200) -> list[int]:
    return [(k * 131 + 17 * i) % 97 for i in range(n)]


def step(sched: Scheduler) -> SchedulerOutput:
    """One step with a fake model: a sampled sequence gets token 1 until max_tokens."""
    out = sched.schedule()
    sched.update_after_step(out)
    for item in out.scheduled:
        if item.sample:
            item.seq.append_token(1)
            if item.seq.num_output_tokens >= (item.seq.params.max_tokens or 0):
                sched.finish(item.seq, "length")
    return out


def chunks(out: SchedulerOutput) -> dict[str, tuple[int, int]]:
    return {i.seq.request_id: (i.start, i.num_new_tokens) for i in out.scheduled}


def predicted_ms(sched: Scheduler, out: SchedulerOutput) -> float:
    rows, pairs = step_features((i.start, i.num_query_tokens) for i in out.scheduled)
    return sched.step_cost.predict_ms(rows, pairs)


def warm_manual(sched: Scheduler) -> None:
    """Department A's manual has been prefilled once: its blocks are cached."""
    first = request([*MANUAL, 5, 6, 7], "a0", "a", max_tokens=1)
    sched.add(first)
    while sched.has_unfinished():
        step(sched)


def test_a_long_prompt_is_chunked_to_the_time_budget() -> None:
    sched = make(budget_ms=100.0)
    sched.add(request(long_prompt(1), "b1", "b"))
    sizes = []
    while sched.has_unfinished():
        out = step(sched)
        assert predicted_ms(sched, out) <= 100.0 + 1e-6
        sizes += [n for (_, n) in chunks(out).values() if n > 1]
    # 80 ms of rows at 0.4 ms, less as the context (and attention) grows; all 1,200 fed.
    assert sizes[0] == sched.step_cost.tokens_within(80.0, 0) and 150 < sizes[0] < 200
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) == 1200


def test_without_a_budget_the_token_budget_alone_decides() -> None:
    sched = make(budget_ms=None, max_num_batched_tokens=1024)
    sched.add(request(long_prompt(1), "b1", "b"))
    assert chunks(step(sched)) == {"b1": (0, 1024)}


def test_a_cached_short_question_goes_first_in_the_next_step_of_a_burst() -> None:
    sched = make()
    warm_manual(sched)
    for k in range(20):
        sched.add(request(long_prompt(k), f"b{k}", "b", max_tokens=16))
    step(sched)
    step(sched)
    sched.add(request([*MANUAL, 8, 9, 10, 11], "a1", "a"))
    out = step(sched)
    # Only its uncached tail (the last partial block and the question) is fed, whole.
    assert chunks(out)["a1"] == (len(MANUAL), 4)
    assert out.scheduled[0].seq.request_id == "a1"  # short first
    assert chunks(out)["b0"][1] > BLOCK  # and b0's prompt goes on, in a chunk
    assert predicted_ms(sched, out) <= 100.0 + 1e-6


def test_on_a_machine_too_slow_for_the_budget_every_tenant_still_progresses() -> None:
    sched = make(budget_ms=5.0)  # less than a step's fixed cost: only the floors move
    warm_manual(sched)
    for k in range(20):
        sched.add(request(long_prompt(k), f"b{k}", "b"))
    step(sched)
    sched.add(request([*MANUAL, 8, 9, 10, 11], "a1", "a"))
    fed = chunks(step(sched))
    assert fed["a1"] == (len(MANUAL), 4) and fed["b0"][1] == BLOCK


def test_decode_rows_are_never_held_back() -> None:
    sched = make(budget_ms=30.0)  # decodes alone use most of it
    decoders = [request(long_prompt(k, 40), f"d{k}", "a", max_tokens=50) for k in range(30)]
    for s in decoders:
        sched.add(s)
    while any(s.num_output_tokens == 0 for s in decoders):
        step(sched)
    for k in range(3):
        sched.add(request(long_prompt(100 + k), f"b{k}", "b"))
    for _ in range(20):
        out = step(sched)
        fed = chunks(out)
        running = [s for s in decoders if not s.is_finished]
        assert all(fed[s.request_id][1] == 1 for s in running if s.request_id in fed)
        assert {s.request_id for s in running} <= set(fed)
        assert any(n > 1 for n in [n for _, n in fed.values()])  # and prefill still moves


def test_two_tenants_long_prompts_share_the_step() -> None:
    sched = make(budget_ms=200.0)
    for k in range(5):
        sched.add(request(long_prompt(k), f"b{k}", "b"))
    step(sched)
    sched.add(request(long_prompt(50), "a1", "a"))
    fed = chunks(step(sched))
    assert "a1" in fed and "b0" in fed
    a, b = fed["a1"][1], fed["b0"][1]
    assert 0.5 < a / b < 3  # about even in time (b0 is further in: its tokens cost more)


def test_long_prompts_finish_while_short_questions_keep_coming() -> None:
    sched = make(budget_ms=60.0)
    warm_manual(sched)
    burst = [request(long_prompt(k, 600), f"b{k}", "b") for k in range(3)]
    for s in burst:
        sched.add(s)
    for n in range(400):
        sched.add(request([*MANUAL, n % 50, 1, 2, 3], f"a{n}", "a", max_tokens=2))
        step(sched)
        if all(s.is_finished for s in burst):
            break
    assert all(s.is_finished for s in burst), "the long prompts starved"
    while sched.has_unfinished():
        step(sched)


def test_step_cost_fit_recovers_a_linear_cost() -> None:
    model = StepCostModel(prior_ms=(5.0, 1.0, 1.0))
    for k in range(200):
        rows, pairs = step_features([(k * 37 % 3000, [1, 16, 300, 900][k % 4])])
        model.observe(rows, pairs, 30.0 + 0.3 * rows + 0.05 * pairs / 1000)
    base, per_row, per_kpair = model.coefficients_ms
    assert abs(base - 30) < 2 and abs(per_row - 0.3) < 0.02 and abs(per_kpair - 0.05) < 0.01
    n = model.tokens_within(150.0, 1000)
    assert model.marginal_ms(1000, n) <= 150.0 < model.marginal_ms(1000, n + 1)


def test_on_a_slow_machine_queued_questions_go_in_together() -> None:
    """Budget smaller than a step's fixed cost: `whole` takes nothing, yet a department's
    queued questions behind its cached manual are let in in one step, not one a step."""
    sched = make(budget_ms=5.0)
    warm_manual(sched)
    for k in range(20):
        sched.add(request(long_prompt(k), f"b{k}", "b"))
    step(sched)
    for n in range(8):
        sched.add(request([*MANUAL, 8, 9, n, 11], f"a{n}", "a"))
    fed = chunks(step(sched))
    assert all(fed[f"a{n}"] == (len(MANUAL), 4) for n in range(8))
    assert fed["b0"][1] == BLOCK  # the burst's head keeps its floor


def test_short_tails_past_the_budget_are_bounded_per_step() -> None:
    sched = make(budget_ms=5.0)
    warm_manual(sched)
    question = list(range(36))  # 36 new tokens behind the cached manual
    for n in range(12):
        sched.add(request([*MANUAL, n, *question], f"a{n}", "a"))
    fed = chunks(step(sched))
    # 37-token tails: six fit in 256 tokens (the first may also go in as the tenant's
    # long candidate), the rest wait for the next steps, in order.
    taken = [n for n in range(12) if f"a{n}" in fed]
    assert taken == list(range(len(taken))) and 6 <= len(taken) <= 7
    again = chunks(step(sched))
    assert f"a{len(taken)}" in again
    # A tail longer than SHORT_TAIL is not forced in: only its tenant's floor chunk moves.
    sched = make(budget_ms=5.0)
    warm_manual(sched)
    sched.add(request([*MANUAL, *range(100)], "long-tail", "a"))
    assert chunks(step(sched))["long-tail"] == (len(MANUAL), BLOCK)
