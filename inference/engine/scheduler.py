"""Continuous batching with one token budget per step. No tensors.

Each step first gives every running sequence its next tokens (a decode's one token, or
the next chunk of a prefill), oldest first, preempting the newest sequences by recompute
when blocks run out; then, if nothing was preempted, admits waiting sequences in fair
order (see :mod:`fair_share`) while budget, blocks and ``max_num_seqs`` allow. Decodes
and prefill chunks share a step: there are no separate phases.

The scheduler is the one writer of a sequence's progress (``num_computed_tokens``,
``num_cached_tokens``), status and ``finish_reason``; the block manager only hands out
blocks and returns counts.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.block_manager import BlockManager, HashFn
from inference.engine.fair_share import FairQueue
from inference.engine.latency_policy import schedule_within_time
from inference.engine.prefix_pins import Pin
from inference.engine.scheduler_output import ScheduledSequence, SchedulerOutput
from inference.engine.sequence import Sequence, SequenceStatus
from inference.engine.step_cost import StepCostModel, step_features


class Scheduler:
    def __init__(
        self,
        scheduler_config: SchedulerConfig,
        cache_config: CacheConfig,
        hash_fn: HashFn = hash,
    ) -> None:
        self.config = scheduler_config
        self.block_manager = BlockManager(
            cache_config.num_blocks,
            cache_config.block_size,
            cache_config.enable_prefix_caching,
            hash_fn,
            max_pinned_blocks=int(cache_config.max_pinned_fraction * cache_config.num_blocks),
        )
        self.waiting = FairQueue()
        self.running: list[Sequence] = []  # in admission order: oldest first
        self.num_preemptions = 0
        self.step_cost = StepCostModel()  # learned from record_step_time

    # -- requests -------------------------------------------------------------------------

    def add(self, seq: Sequence) -> None:
        """Queue a sequence; ValueError (with both numbers) if it could never run."""
        limit = self.config.max_model_len
        prompt = len(seq)
        if prompt > limit:
            raise ValueError(f"prompt has {prompt} tokens, more than max_model_len {limit}")
        max_tokens = seq.params.max_tokens
        if max_tokens is not None and prompt + max_tokens > limit:
            raise ValueError(
                f"prompt has {prompt} tokens and max_tokens is {max_tokens}: together more "
                f"than max_model_len {limit}"
            )
        total = limit if max_tokens is None else prompt + max_tokens
        needed = self.block_manager.blocks_needed(total)
        pinned = self.block_manager.num_pinned_blocks
        if needed > self.block_manager.num_blocks - pinned:
            held = f" less the {pinned * self.block_manager.block_size} tokens pinned prefixes hold"
            raise ValueError(
                f"request needs up to {total} tokens of KV cache, more than the pool's "
                f"{self.block_manager.capacity_tokens}{held if pinned else ''}"
            )
        seq.status = SequenceStatus.WAITING
        self.waiting.push(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a running (or already dequeued) sequence; its blocks are freed at once."""
        if seq in self.running:
            self.running.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self._release(seq)

    def abort(self, request_id: str) -> list[Sequence]:
        aborted = self.waiting.remove(request_id)
        aborted += [s for s in self.running if s.request_id == request_id]
        for seq in aborted:
            self.finish(seq, "abort")
        return aborted

    def has_unfinished(self) -> bool:
        return bool(self.running) or len(self.waiting) > 0

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def prefix_cache_queries(self) -> int:
        return self.block_manager.prefix_cache_queries

    @property
    def prefix_cache_hits(self) -> int:
        return self.block_manager.prefix_cache_hits

    # -- pinned prefixes ------------------------------------------------------------------

    def pin_prefix(self, token_ids: Seq[int], *, only_if_cached: bool = False) -> Pin | None:
        """BlockManager.pin, keeping room for every request in flight to run alone (a pin
        that left less would stall it forever); call between steps."""
        in_flight = [*self.running, *self.waiting]
        reserve = max((self._blocks_needed_at_most(s) for s in in_flight), default=0)
        return self.block_manager.pin(
            token_ids, reserve_blocks=reserve, only_if_cached=only_if_cached
        )

    def unpin_prefix(self, pin_id: str) -> Pin:
        return self.block_manager.unpin(pin_id)

    def _blocks_needed_at_most(self, seq: Sequence) -> int:
        max_tokens = seq.params.max_tokens
        limit = self.config.max_model_len
        total = limit if max_tokens is None else seq.num_prompt_tokens + max_tokens
        return self.block_manager.blocks_needed(min(total, limit))

    # -- the step -------------------------------------------------------------------------

    def schedule(self, proposals: Mapping[int, Seq[int]] | None = None) -> SchedulerOutput:
        """The next step. ``proposals`` (seq_id -> proposed tokens, speculative decoding)
        turns a running sequence's decode into a verify step when budget and free blocks
        allow all of them; otherwise it decodes plainly (nothing is preempted for them).

        With ``step_time_budget_ms`` set, the step is planned to take about that long
        (see :mod:`latency_policy`); otherwise it is filled up to the token budget."""
        output = SchedulerOutput()
        if self.config.step_time_budget_ms is not None:
            schedule_within_time(self, output, proposals or {})
            return output
        budget = self.config.max_num_batched_tokens
        budget = self._schedule_running(output, budget, proposals or {})
        if output.num_preempted == 0:
            self._admit_waiting(output, budget)
        return output

    def update_after_step(self, output: SchedulerOutput) -> None:
        """The step ran: the scheduled tokens' KV is now in the cache."""
        for item in output.scheduled:
            item.seq.num_computed_tokens = item.end

    def record_step_time(self, output: SchedulerOutput, elapsed_s: float) -> None:
        """The step took ``elapsed_s`` (schedule to sampled tokens): teach the cost model."""
        rows, pairs = step_features((i.start, i.num_query_tokens) for i in output.scheduled)
        self.step_cost.observe(rows, pairs, elapsed_s * 1000.0)

    def accept_speculated(self, seq: Sequence, num_accepted: int) -> None:
        """After a verify step: the first ``num_accepted`` proposed tokens (the engine has
        appended them) keep their KV; the rejected ones' slots are released, so the block
        table ends with the accepted tokens. A finished sequence holds nothing to trim."""
        if seq.is_finished:
            return
        computed = seq.num_computed_tokens + num_accepted
        if computed >= len(seq):
            raise ValueError(f"sequence {seq.seq_id}: {num_accepted} accepted of too few tokens")
        seq.num_computed_tokens = computed
        self.block_manager.truncate(seq, computed)

    def _schedule_running(
        self, output: SchedulerOutput, budget: int, proposals: Mapping[int, Seq[int]]
    ) -> int:
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            num_new = min(len(seq) - seq.num_computed_tokens, budget)
            if num_new == 0:  # nothing to feed until the engine appends a token
                index += 1
                continue
            spec = tuple(proposals.get(seq.seq_id, ()))[: budget - 1] if num_new == 1 else ()
            if not self.feed(output, seq, num_new, spec):
                break  # it was the newest: nothing runs after it
            budget -= output.scheduled[-1].num_query_tokens
            index += 1
        return budget

    def _admit_waiting(self, output: SchedulerOutput, budget: int) -> None:
        while budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting.peek()
            if seq is None:
                return
            rest = lambda s, b=budget: min(len(s) - s.num_computed_tokens, b)  # noqa: E731
            if not self.admit(output, seq, rest):
                return
            budget -= output.scheduled[-1].num_new_tokens

    # -- what a policy builds a step from ---------------------------------------------------

    def feed(
        self, output: SchedulerOutput, seq: Sequence, num_new: int, spec: tuple[int, ...] = ()
    ) -> bool:
        """Schedule ``num_new`` tokens of a running sequence (with ``spec``: a verify step,
        when the blocks for all of them are free), preempting the newest running sequences
        while blocks are short; False when ``seq`` itself had to be preempted."""
        if spec and self.block_manager.allocate_slots(seq, 1 + len(spec)):
            self._add_to_step(output, seq, 1, spec)
            return True
        while not self.block_manager.allocate_slots(seq, num_new):
            victim = self.running[-1]
            self._preempt(victim)
            output.num_preempted += 1
            if victim is seq:
                return False
        self._add_to_step(output, seq, num_new)
        return True

    def admit(
        self, output: SchedulerOutput, seq: Sequence, chunk: Callable[[Sequence], int]
    ) -> bool:
        """Admit ``seq``, the head of its tenant's queue, with ``chunk(seq)`` new tokens;
        ``chunk`` is asked once the cached prefix is allocated, so ``seq.num_computed_tokens``
        says what the cache supplied. False, changing nothing, when the chunk is 0 or
        blocks are short."""
        seq.num_computed_tokens = self.block_manager.allocate_prefix(seq)
        num_new = chunk(seq)
        if num_new <= 0 or not self.block_manager.allocate_slots(seq, num_new):
            self._release(seq)  # give back the prefix hits; try next step
            return False
        self.waiting.pop(seq)
        self.block_manager.record_lookup(seq)
        if seq.num_preemptions == 0:  # what the caller sees: the first admission's hits
            seq.num_cached_tokens = seq.num_computed_tokens
        seq.status = SequenceStatus.RUNNING
        self.running.append(seq)
        self._add_to_step(output, seq, num_new)
        return True

    def _preempt(self, seq: Sequence) -> None:
        """Preempt by recompute: drop its KV; it re-enters ahead of new arrivals."""
        self.running.remove(seq)
        self._release(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.push_front(seq)

    def _release(self, seq: Sequence) -> None:
        """Free a sequence's blocks: none of its tokens is computed any more."""
        self.block_manager.free(seq)
        seq.num_computed_tokens = 0

    def _add_to_step(
        self, output: SchedulerOutput, seq: Sequence, num_new: int, spec: tuple[int, ...] = ()
    ) -> None:
        start = seq.num_computed_tokens
        output.scheduled.append(
            ScheduledSequence(
                seq=seq,
                start=start,
                num_new_tokens=num_new,
                sample=start + num_new == len(seq),
                spec_token_ids=spec,
            )
        )
        # Registered now, not after the step, so a sibling admitted next in this same step
        # already hits these blocks (see BlockManager.register_full_blocks). Only the
        # sequence's own tokens: blocks holding proposed tokens are never registered.
        self.block_manager.register_full_blocks(seq, start + num_new)
