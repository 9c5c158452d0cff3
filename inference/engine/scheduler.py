"""Continuous batching with one token budget per step. No tensors.

Each step first gives every running sequence its next tokens (a decode's one token, or
the next chunk of a prefill), oldest first, preempting the newest sequences by recompute
when blocks run out; then, if nothing was preempted, admits waiting sequences in fair
order (see :mod:`fair_share`) while budget, blocks and ``max_num_seqs`` allow. Decodes
and prefill chunks share a step: there are no separate phases.
"""

from __future__ import annotations

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.block_manager import BlockManager, HashFn
from inference.engine.fair_share import FairQueue
from inference.engine.scheduler_output import ScheduledSequence, SchedulerOutput
from inference.engine.sequence import Sequence, SequenceStatus


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
        )
        self.waiting = FairQueue()
        self.running: list[Sequence] = []  # in admission order: oldest first
        self.num_preemptions = 0

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
        if needed > self.block_manager.num_blocks:
            raise ValueError(
                f"request needs up to {total} tokens of KV cache, more than the pool's "
                f"{self.block_manager.capacity_tokens}"
            )
        seq.status = SequenceStatus.WAITING
        self.waiting.push(seq)

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a running (or already dequeued) sequence; its blocks are freed at once."""
        if seq in self.running:
            self.running.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        self.block_manager.free(seq)

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

    # -- the step -------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        output = SchedulerOutput()
        budget = self.config.max_num_batched_tokens
        budget = self._schedule_running(output, budget)
        if output.num_preempted == 0:
            self._admit_waiting(output, budget)
        return output

    def update_after_step(self, output: SchedulerOutput) -> None:
        """The step ran: the scheduled tokens' KV is now in the cache."""
        for item in output.scheduled:
            item.seq.num_computed_tokens = item.end

    def _schedule_running(self, output: SchedulerOutput, budget: int) -> int:
        index = 0
        while index < len(self.running) and budget > 0:
            seq = self.running[index]
            num_new = min(len(seq) - seq.num_computed_tokens, budget)
            if num_new == 0:  # nothing to feed until the engine appends a token
                index += 1
                continue
            while not self.block_manager.allocate_slots(seq, num_new):
                victim = self.running[-1]
                self._preempt(victim)
                output.num_preempted += 1
                if victim is seq:
                    break
            else:
                self._add_to_step(output, seq, num_new)
                budget -= num_new
                index += 1
        return budget

    def _admit_waiting(self, output: SchedulerOutput, budget: int) -> None:
        while budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting.peek()
            if seq is None:
                return
            self.block_manager.allocate_prefix(seq)
            num_new = min(len(seq) - seq.num_computed_tokens, budget)
            if not self.block_manager.allocate_slots(seq, num_new):
                self.block_manager.free(seq)  # give back the prefix hits; try next step
                return
            self.waiting.pop(seq)
            self.block_manager.record_lookup(seq)
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            self._add_to_step(output, seq, num_new)
            budget -= num_new

    def _preempt(self, seq: Sequence) -> None:
        """Preempt by recompute: drop its KV; it re-enters ahead of new arrivals."""
        self.running.remove(seq)
        self.block_manager.free(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.push_front(seq)

    def _add_to_step(self, output: SchedulerOutput, seq: Sequence, num_new: int) -> None:
        start = seq.num_computed_tokens
        output.scheduled.append(
            ScheduledSequence(
                seq=seq, start=start, num_new_tokens=num_new, sample=start + num_new == len(seq)
            )
        )
        # Registered now, not after the step, so a sibling admitted next in this same step
        # already hits these blocks (see BlockManager.register_full_blocks).
        self.block_manager.register_full_blocks(seq, start + num_new)
