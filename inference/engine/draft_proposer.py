"""The draft-model proposer of speculative decoding: a smaller model proposes greedily.

The draft runs on the engine's own parts (a `ModelRunner` over the draft model, steps made
by `prepare_step`, a `BlockManager`) with its own KV pool. For each target sequence it
keeps a *mirror*: a `Sequence` in the draft's pool whose first ``num_computed_tokens``
tokens have KV there. Proposing for a batch of sequences takes:

1. **Catch-up**: the mirror keeps the longest prefix that still matches the target
   sequence (what the draft had computed of it: the prompt, earlier accepted tokens, and
   those of its own proposals that the target accepted), never its last token, and
   releases the blocks past it (`BlockManager.truncate`, the rollback of rejected
   proposals). It then feeds the rest (a first prompt prefill, or last step's accepted
   tokens and the target's added one) in chunks within ``max_num_batched_tokens``; the
   chunk ending at the last token gives the first proposal.
2. **Draft decodes**: ``k - 1`` more one-token steps, all rows batched, each taking the
   argmax of the previous row (greedy: with the verifier's point-mass acceptance the
   emitted tokens keep exactly the target's distribution, whatever the draft proposes).

Only the sequence's own (verified) tokens are registered in the draft's prefix cache, so
samples of one prompt (``n > 1``) and repeated prompts share the draft's prefill too.
When the draft's pool runs short, mirrors of sequences not proposing this step are
dropped first; a row that still does not fit gets no proposal (it decodes plainly).
`retain` frees the mirrors of sequences that stopped running (finished, aborted,
preempted); a preempted sequence's draft starts again from its prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from inference.engine.block_manager import BlockManager
from inference.engine.draft_model import DraftModel
from inference.engine.model_runner import ModelRunner
from inference.engine.scheduler_output import ScheduledSequence, SchedulerOutput
from inference.engine.sequence import Sequence
from inference.sampling.params import SamplingParams

_MIRROR_PARAMS = SamplingParams(temperature=0)
log = logging.getLogger("inference.engine")


@dataclass(eq=False, slots=True)
class _Mirror:
    seq: Sequence  # the draft's copy: the target's tokens, then the draft's own proposals
    verified: int  # its first `verified` tokens are the target's (never change)


@dataclass(eq=False, slots=True)
class _Row:
    target: Sequence
    mirror: _Mirror
    num_tokens: int  # to propose
    proposed: list[int]


class DraftProposer:
    def __init__(
        self,
        draft: DraftModel,
        num_tokens: int,
        *,
        num_blocks: int,
        block_size: int,
        device: torch.device,
        enable_prefix_caching: bool = True,
        max_num_batched_tokens: int = 2048,
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
        attention_backend: str = "auto",
        enforce_eager: bool = False,
    ) -> None:
        """``num_tokens``: k, the most tokens proposed per step; ``num_blocks``: the draft
        pool's blocks of ``block_size`` tokens."""
        if num_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be at least 1, got {num_tokens}")
        self.num_tokens = num_tokens
        self.draft = draft
        self.max_num_batched_tokens = max_num_batched_tokens
        self.block_manager = BlockManager(num_blocks, block_size, enable_prefix_caching)
        self.runner = ModelRunner(
            draft.model,
            draft.arch,
            num_blocks=num_blocks,
            block_size=block_size,
            kv_dtype=draft.model.dtype,
            device=device,
            attention_backend=attention_backend,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
        )
        self.mirrors: dict[int, _Mirror] = {}  # target seq_id -> its mirror
        log.info(
            "draft model %s: KV pool of %d blocks of %d tokens (%d bytes/token)",
            draft.path,
            num_blocks,
            block_size,
            draft.kv_bytes_per_token,
        )
        self.num_forward_steps = 0  # the draft's forward passes (catch-up and decodes)

    # -- the Proposer interface -----------------------------------------------------------

    def retain(self, running: Iterable[Sequence]) -> None:
        live = {seq.seq_id for seq in running}
        for seq_id in [s for s in self.mirrors if s not in live]:
            self._drop(seq_id)

    def propose_batch(self, rows: list[tuple[Sequence, int]]) -> dict[int, list[int]]:
        proposing = {seq.seq_id for seq, _ in rows}
        active = []
        for seq, limit in rows:
            row = self._prepare(seq, min(self.num_tokens, limit), proposing)
            if row is not None:
                active.append(row)
        if not active:
            return {}
        self._catch_up(active)
        for _ in range(1, max(row.num_tokens for row in active)):
            step = [row for row in active if len(row.proposed) < row.num_tokens]
            items = [ScheduledSequence(r.mirror.seq, len(r.mirror.seq) - 1, 1, True) for r in step]
            for row, token in zip(step, self._run(items), strict=True):
                row.mirror.seq.append_token(token)
                row.proposed.append(token)
        return {row.target.seq_id: row.proposed for row in active}

    # -- the steps ------------------------------------------------------------------------

    def _prepare(self, target: Sequence, num_tokens: int, proposing: set[int]) -> _Row | None:
        """Roll the mirror back to what still matches ``target`` and give it the slots of
        this round; None when the draft's pool cannot hold them."""
        bm = self.block_manager
        length = len(target)
        mirror = self.mirrors.get(target.seq_id)
        if mirror is None:
            seq = Sequence(target.request_id, list(target.token_ids), _MIRROR_PARAMS)
            seq.num_computed_tokens = bm.allocate_prefix(seq)
            mirror = self.mirrors[target.seq_id] = _Mirror(seq, length)
        else:
            seq = mirror.seq
            keep = min(seq.num_computed_tokens, length - 1)
            same = min(mirror.verified, keep)  # tokens known to be the target's
            keep = same + _common_length(seq.token_ids[same:keep], target.token_ids[same:keep])
            bm.truncate(seq, keep)
            del seq.block_hashes[keep // bm.block_size :]
            del seq.token_ids[keep:]
            seq.token_ids.extend(target.token_ids[keep:])
            seq.num_computed_tokens = keep
            mirror.verified = length
        # KV for the rest of the target's tokens and all proposals but the last.
        needed = length - seq.num_computed_tokens + num_tokens - 1
        for other in list(self.mirrors):
            if bm.allocate_slots(seq, needed):
                return _Row(target, mirror, num_tokens, [])
            if other not in proposing:
                self._drop(other)
        return _Row(target, mirror, num_tokens, []) if bm.allocate_slots(seq, needed) else None

    def _catch_up(self, rows: list[_Row]) -> None:
        """Feed each mirror the target's tokens it lacks, in chunks within the token
        budget; the chunk that ends at the last token proposes the first token."""
        pending = rows
        while pending:
            budget = self.max_num_batched_tokens
            items: list[ScheduledSequence] = []
            later: list[_Row] = []
            for row in pending:
                seq = row.mirror.seq
                remaining = len(seq) - seq.num_computed_tokens
                num = min(remaining, budget)
                if num > 0:
                    items.append(
                        ScheduledSequence(seq, seq.num_computed_tokens, num, num == remaining)
                    )
                    budget -= num
                if num < remaining:
                    later.append(row)
            for item in items:  # the target's tokens: verified, so cacheable
                self.block_manager.register_full_blocks(item.seq, item.end)
            sampled = iter(self._run(items))
            for row in pending:
                if row not in later:
                    token = next(sampled)
                    row.mirror.seq.append_token(token)
                    row.proposed.append(token)
            pending = later

    def _run(self, items: list[ScheduledSequence]) -> list[int]:
        """One forward pass of the draft; the argmax of each sampling item, in order."""
        result = self.runner.execute(SchedulerOutput(scheduled=items), want_prompt_logits=set())
        self.num_forward_steps += 1
        for item in items:
            item.seq.num_computed_tokens = item.end
        tokens: list[int] = result.logits.argmax(dim=-1).tolist()
        return tokens

    def _drop(self, seq_id: int) -> None:
        self.block_manager.free(self.mirrors.pop(seq_id).seq)


def _common_length(a: list[int], b: list[int]) -> int:
    """How many leading entries ``a`` and ``b`` share."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))
