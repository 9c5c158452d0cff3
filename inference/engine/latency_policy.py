"""Scheduling to a time budget per step: the policy ``step_time_budget_ms`` turns on.

A token budget alone lets one long prompt fill a step with a 2,048-token chunk; on a
CPU that step takes a second or more, and every other request (a decode, a question
whose long prefix is cached and needs a 30-token prefill) waits for it. Here a step is
planned to take about ``step_time_budget_ms``, priced by the scheduler's
:class:`~inference.engine.step_cost.StepCostModel` (fitted online to the steps that
ran), and filled in this order:

1. **Decode rows**: every running sequence with one token to feed (a verify step's
   proposed tokens with it). Never held back: only ``max_num_batched_tokens`` bounds them.
2. **Short prefills**: whatever prompt rest fits whole in the time left. Running
   sequences partway through their prompt first (oldest first), then waiting ones by
   fair share (:meth:`FairQueue.heads`): a waiting head is priced by its uncached tail,
   so a question behind a cached manual is short however long its prompt. A tenant's
   queue is FIFO: its later requests wait behind its head.
3. **Long prefills**, chunked: one candidate per tenant (its oldest running prompt, else
   its waiting head), the time left shared between them by weight, so one department's
   burst of long prompts and another's long prompt both progress and neither queues the
   other. Whatever time remains then goes to further chunks and admissions in order.

A waiting request that needs the next block of a prompt a running prefill is computing
(the same system prompt, sent moments apart) waits for that prefill instead of computing
the same tokens beside it, and the prefill's share counts that request's weight too (see
:mod:`prefix_leaders`).

Then **short tails** past the budget: prompt rests of at most ``SHORT_TAIL`` tokens (a
question behind a cached prefix), up to ``SHORT_TAILS_PER_STEP`` tokens a step, so that
on a machine slower than the budget a department's queued questions are not let in one a
step.

The prefill phases get at least ``MIN_PREFILL_SHARE`` of the budget even when decode rows
alone would use it all, and each tenant's long candidate at least a block's worth of
tokens per step, even past the budget (on a machine too slow for it): long prompts are
slowed by short ones, never stopped, and no tenant's prompt waits for another's.
Nothing is admitted in a step that preempted (as with the token budget alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from functools import partial
from typing import TYPE_CHECKING

from inference.engine.prefix_leaders import FOLLOWERS_SCANNED, follower_weights, leader_of
from inference.engine.scheduler_output import SchedulerOutput
from inference.engine.sequence import Sequence
from inference.engine.step_cost import step_features

if TYPE_CHECKING:
    from inference.engine.scheduler import Scheduler

MIN_PREFILL_SHARE = 0.25
# A prompt rest this short (a question behind a cached manual) goes in even past the
# budget, up to SHORT_TAILS_PER_STEP tokens of them a step (see _short_tails).
SHORT_TAIL = 64
SHORT_TAILS_PER_STEP = 256


class _Plan:
    """The step being built: what is scheduled, the time and tokens still free."""

    def __init__(self, sched: Scheduler, output: SchedulerOutput) -> None:
        self.sched = sched
        self.output = output
        self.tokens_left = sched.config.max_num_batched_tokens
        self.ms_left = 0.0
        self.done: set[int] = set()  # seq ids scheduled in this step
        self.ends: dict[int, int] = {}  # seq id -> tokens computed once this step ran
        # Running prefills -> the weight of the waiting requests that need their blocks.
        self.followers = follower_weights(
            sched.block_manager, sched.running, sched.waiting.leading(FOLLOWERS_SCANNED)
        )

    def pending(self, seq: Sequence) -> int:
        return len(seq) - seq.num_computed_tokens

    def prompt_rest(self, seq: Sequence) -> int:
        """Tokens of a prompt (or recomputed context) still to feed; 0 for a decode."""
        rest = self.pending(seq)
        return rest if rest > 1 and seq.seq_id not in self.done else 0

    def chunk(self, seq: Sequence, ms: float, floor: int = 0) -> int:
        """The largest chunk of ``seq``'s rest that fits ``ms`` and the token budget, or
        at least ``floor`` tokens."""
        start, rest = seq.num_computed_tokens, self.pending(seq)
        n = max(self.sched.step_cost.tokens_within(ms, start), floor)
        return max(0, min(n, rest, self.tokens_left))

    def chunk_in_time_left(self, seq: Sequence) -> int:
        return self.chunk(seq, self.ms_left)

    def whole(self, seq: Sequence) -> int:
        """The rest of ``seq`` if it fits whole in the time and tokens left, else 0."""
        rest = self.pending(seq)
        cost = self.sched.step_cost.marginal_ms(seq.num_computed_tokens, rest)
        return rest if rest <= self.tokens_left and cost <= self.ms_left else 0

    def took(self, seq: Sequence) -> None:
        item = self.output.scheduled[-1]
        self.done.add(seq.seq_id)
        self.ends[seq.seq_id] = item.end
        self.tokens_left -= item.num_query_tokens
        self.ms_left -= self.sched.step_cost.marginal_ms(item.start, item.num_query_tokens)

    def feed(self, seq: Sequence, num_new: int) -> None:
        sched = self.sched
        if num_new > 0 and seq in sched.running and sched.feed(self.output, seq, num_new):
            self.took(seq)

    def admit(self, seq: Sequence, chunk_of: Callable[[Sequence], int]) -> bool:
        sched = self.sched
        if self.output.num_preempted or len(sched.running) >= sched.config.max_num_seqs:
            return False
        if leader_of(sched.block_manager, sched.running, seq, self.ends) is not None:
            return False  # it waits for the prefill computing its next blocks
        if sched.admit(self.output, seq, chunk_of):
            self.took(seq)
            return True
        return False


def schedule_within_time(
    sched: Scheduler, output: SchedulerOutput, proposals: Mapping[int, Seq[int]]
) -> None:
    plan = _Plan(sched, output)
    budget_ms = sched.config.step_time_budget_ms or 0.0
    _decode_rows(plan, proposals)
    rows, pairs = step_features((i.start, i.num_query_tokens) for i in output.scheduled)
    plan.ms_left = max(
        budget_ms - sched.step_cost.predict_ms(rows, pairs), MIN_PREFILL_SHARE * budget_ms
    )
    _short_prefills(plan)
    _short_tails(plan)
    _long_prefills(plan)


def _decode_rows(plan: _Plan, proposals: Mapping[int, Seq[int]]) -> None:
    running = plan.sched.running
    index = 0
    while index < len(running) and plan.tokens_left > 0:
        seq = running[index]
        if plan.pending(seq) != 1:
            index += 1
            continue
        spec = tuple(proposals.get(seq.seq_id, ()))[: plan.tokens_left - 1]
        if not plan.sched.feed(plan.output, seq, 1, spec):
            return  # it was the newest running sequence
        plan.done.add(seq.seq_id)
        plan.tokens_left -= plan.output.scheduled[-1].num_query_tokens
        index += 1


def _short_prefills(plan: _Plan) -> None:
    for seq in list(plan.sched.running):
        if plan.prompt_rest(seq):
            plan.feed(seq, plan.whole(seq))
    admitted = True
    while admitted:
        admitted = any(plan.admit(head, plan.whole) for head in plan.sched.waiting.heads())


def _short_tails(plan: _Plan) -> None:
    """Questions behind a cached prefix, taken even past the time left: a tail of at most
    ``SHORT_TAIL`` tokens, up to ``SHORT_TAILS_PER_STEP`` tokens of them in a step.

    Where the machine is slower than the budget (loaded, or the budget too small for it),
    decode rows leave only the floor share, `whole` takes nothing, and each tenant would
    get one question a step (its long candidate): a department's 20 users queued behind
    its head, one per step of seconds. A short tail costs about what the floor chunk a
    tenant is guaranteed anyway costs, so they go in together, bounded per step.
    """
    left = SHORT_TAILS_PER_STEP

    def tail(seq: Sequence) -> int:
        rest = plan.pending(seq)
        return rest if rest <= min(SHORT_TAIL, left, plan.tokens_left) else 0

    for seq in list(plan.sched.running):
        rest = plan.prompt_rest(seq)
        if rest and tail(seq):
            plan.feed(seq, rest)
            left -= rest
    admitted = True
    while admitted and left > 0:
        admitted = False
        for head in plan.sched.waiting.heads():
            if plan.admit(head, tail):
                left -= plan.output.scheduled[-1].num_new_tokens
                admitted = True
                break  # the heads change with each admission


def _long_prefills(plan: _Plan) -> None:
    sched = plan.sched
    candidates: list[Sequence] = []
    tenants: set[str] = set()
    for seq in sched.running:
        if plan.prompt_rest(seq) and seq.tenant not in tenants:
            candidates.append(seq)
            tenants.add(seq.tenant)
    candidates += [h for h in sched.waiting.heads() if h.tenant not in tenants]
    # A running prefill is also the prefill of the requests waiting for its blocks.
    weights = [c.weight + plan.followers.get(c.seq_id, 0.0) for c in candidates]
    weight_left = sum(weights)
    floor = sched.block_manager.block_size  # every tenant progresses, however slow a step
    for seq, weight in zip(candidates, weights, strict=True):
        share = plan.ms_left * weight / weight_left
        weight_left -= weight
        if seq in sched.running:
            plan.feed(seq, plan.chunk(seq, share, floor))
        else:
            plan.admit(seq, partial(plan.chunk, ms=share, floor=floor))
    # What is left: more chunks of running prompts, then admissions, in order.
    for seq in list(sched.running):
        if plan.prompt_rest(seq) and plan.ms_left > 0:
            plan.feed(seq, plan.chunk(seq, plan.ms_left))
    while plan.ms_left > 0 and plan.tokens_left > 0:
        head = sched.waiting.peek()
        if head is None or not plan.admit(head, plan.chunk_in_time_left):
            return
