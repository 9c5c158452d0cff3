"""Requests sharing a prefix another request is still prefilling wait for it (the time
budget policy, on a fixed cost model), and that prefill's share counts them."""

from __future__ import annotations

from inference.engine.prefix_leaders import FOLLOWERS_SCANNED, follower_weights, leader_of
from inference.engine.sequence import Sequence
from tests.inference.engine.test_latency_policy import (
    BLOCK,
    chunks,
    long_prompt,
    make,
    request,
    step,
)

# A cold manual, longer than one 100 ms step prefills.
COLD = [(5 * i + 1) % 83 for i in range(1200)]


def question(n: int, tenant: str = "a") -> Sequence:
    return request([*COLD, 60 + n, 1, 2], f"{tenant}{n}", tenant)


def test_a_second_request_waits_for_the_first_ones_prefill_of_the_shared_prefix() -> None:
    """Another tenant's request (the same system prompt in two departments): as a tenant's
    head it would get its own share of the step, and spend it on the same tokens."""
    sched = make(budget_ms=100.0)
    first, second = question(0), question(1, "b")
    sched.add(first)
    step(sched)
    assert 0 < first.num_computed_tokens < len(COLD)  # partway through the manual
    sched.add(second)
    fed_to_second = 0
    while second.num_output_tokens == 0:
        fed_to_second += chunks(step(sched)).get("b1", (0, 0))[1]
    # The second computed nothing of the manual beside the first: it took every full block
    # of it from the cache and fed only its own tail.
    full = len(COLD) // BLOCK * BLOCK
    assert second.num_cached_tokens == full
    assert fed_to_second == second.num_prompt_tokens - full
    assert sched.prefix_cache_hits == full


def test_without_the_shared_prefix_a_request_is_admitted_beside_a_prefill() -> None:
    sched = make(budget_ms=100.0)
    sched.add(question(0))
    step(sched)
    other = request(long_prompt(3, 40), "a9", "a")  # another prompt, short
    sched.add(other)
    assert "a9" in chunks(step(sched))


def test_leader_is_the_prefill_that_computes_the_next_block() -> None:
    sched = make(budget_ms=100.0)
    first = question(0)
    sched.add(first)
    step(sched)
    blocks, running = sched.block_manager, sched.running
    assert leader_of(blocks, running, question(1), {}) is first
    assert leader_of(blocks, running, question(2, "b"), {}) is first  # any tenant
    # Shares only the blocks already computed: nothing of it is left to wait for.
    done = first.num_computed_tokens // BLOCK * BLOCK
    assert leader_of(blocks, running, request([*COLD[:done], 99, 98], "x", "a"), {}) is None
    # The first's prefill passed the shared part in this step: no longer a leader.
    assert leader_of(blocks, running, question(3), {first.seq_id: len(COLD)}) is None


def test_a_prefill_that_others_wait_for_gets_their_share_of_the_step() -> None:
    sched = make(budget_ms=200.0)
    for k in range(5):
        sched.add(request(long_prompt(k), f"b{k}", "b"))
    step(sched)
    first = question(0)
    sched.add(first)
    step(sched)
    for n in (1, 2, 3):
        sched.add(question(n))
    assert follower_weights(sched.block_manager, sched.running, sched.waiting) == {
        first.seq_id: 3.0
    }
    fed = chunks(step(sched))
    a, b = fed["a0"][1], fed["b0"][1]
    # Four requests' prefill against one: well past the even split of two tenants (which
    # test_two_tenants_long_prompts_share_the_step bounds by 3).
    assert a / b > 3


def test_followers_are_counted_among_the_first_of_each_tenants_queue() -> None:
    """A long queue costs the step no more than its first FOLLOWERS_SCANNED requests."""
    sched = make(budget_ms=100.0)
    first = question(0)
    sched.add(first)
    step(sched)
    for n in range(1, FOLLOWERS_SCANNED + 11):
        sched.add(question(n))
    sched.add(question(99, "b"))
    counted = sched.waiting.leading(FOLLOWERS_SCANNED)
    assert follower_weights(sched.block_manager, sched.running, counted) == {
        first.seq_id: FOLLOWERS_SCANNED + 1.0
    }
