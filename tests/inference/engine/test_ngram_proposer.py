"""The n-gram proposer, and the verify step's layout and rollback in the scheduler."""

from __future__ import annotations

import pytest

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.ngram_proposer import NgramProposer
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence
from inference.engine.step_inputs import prepare_step
from inference.sampling.params import SamplingParams


def test_longest_ngram_first_latest_occurrence() -> None:
    proposer = NgramProposer(3, max_n=3, min_n=1)
    # "1 2 3" recurs: what followed its latest earlier occurrence is proposed.
    assert proposer.propose([1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 5, 1, 2, 3]) == [7, 8, 5]
    # Only the last token recurs (n = 1), near the end: fewer than k tokens follow.
    assert proposer.propose([4, 6, 8, 6]) == [8, 6]
    assert proposer.propose([1, 2, 3, 4]) == []
    assert proposer.propose([5]) == []
    assert proposer.propose([1, 2, 1, 2, 1], limit=1) == [2]
    assert NgramProposer(3, max_n=3, min_n=2).propose([4, 6, 8, 6]) == []
    with pytest.raises(ValueError):
        NgramProposer(0)
    with pytest.raises(ValueError):
        NgramProposer(2, max_n=1, min_n=2)


def make_scheduler(block_size: int = 4, num_blocks: int = 16) -> Scheduler:
    return Scheduler(
        SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64),
        CacheConfig(block_size=block_size, num_blocks=num_blocks),
    )


def test_verify_step_layout_and_rollback() -> None:
    scheduler = make_scheduler()
    seq = Sequence("r", list(range(10, 16)), SamplingParams(max_tokens=20))
    scheduler.add(seq)
    scheduler.update_after_step(scheduler.schedule())  # the prefill
    seq.append_token(16)  # 7 tokens, 6 computed
    out = scheduler.schedule({seq.seq_id: [17, 18, 19, 20]})
    (item,) = out.scheduled
    assert item.spec_token_ids == (17, 18, 19, 20) and item.num_query_tokens == 5
    assert out.num_tokens == 5
    step = prepare_step(out, 4)
    assert step.input_ids.tolist() == [16, 17, 18, 19, 20]
    assert step.positions.tolist() == [6, 7, 8, 9, 10]
    assert step.sample_rows == [0, 1, 2, 3, 4]
    assert step.seq_lens == [11]
    assert len(seq.block_table) == 3  # 11 slots
    bm = scheduler.block_manager
    # Only the sequence's own full block (tokens 10..13) is registered, none with proposals.
    assert [b.token_ids for b in bm.cached.values()] == [(10, 11, 12, 13)]
    scheduler.update_after_step(out)
    assert seq.num_computed_tokens == 7
    seq.append_token(17)
    seq.append_token(99)  # one proposal accepted, then the target's own token
    scheduler.accept_speculated(seq, 1)
    assert seq.num_computed_tokens == 8 and len(seq.block_table) == 2
    bm.check_integrity([seq])
    assert bm.num_free_blocks == 14


def test_verify_falls_back_to_a_plain_decode_without_blocks() -> None:
    scheduler = make_scheduler(num_blocks=2)
    seq = Sequence("r", list(range(10, 17)), SamplingParams(max_tokens=1))
    scheduler.add(seq)
    scheduler.update_after_step(scheduler.schedule())
    seq.append_token(5)  # 8 tokens in 2 blocks: a proposal would need a third
    out = scheduler.schedule({seq.seq_id: [1, 2]})
    (item,) = out.scheduled
    assert item.spec_token_ids == () and item.num_new_tokens == 1
    assert scheduler.num_preemptions == 0
