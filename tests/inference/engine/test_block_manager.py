from __future__ import annotations

from inference.engine.block_manager import BlockManager
from inference.engine.sequence import Sequence
from inference.sampling.params import SamplingParams


def seq(tokens: list[int], request_id: str = "r") -> Sequence:
    return Sequence(request_id=request_id, token_ids=list(tokens), params=SamplingParams())


def admit(bm: BlockManager, s: Sequence) -> int:
    """What the scheduler does for a new sequence, computing all of it in one step; the
    number of tokens the prefix cache supplied."""
    hits = s.num_computed_tokens = bm.allocate_prefix(s)
    assert bm.allocate_slots(s, len(s) - s.num_computed_tokens)
    bm.register_full_blocks(s, len(s))
    bm.record_lookup(s)
    s.num_computed_tokens = len(s)
    return hits


def test_allocate_and_free_keep_refcounts_and_the_free_queue_consistent() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    a, b = seq(list(range(10)), "a"), seq(list(range(100, 105)), "b")
    admit(bm, a)
    admit(bm, b)
    assert len(a.block_table) == 3 and len(b.block_table) == 2
    assert bm.num_free_blocks == 3 and bm.usage == 5 / 8
    bm.check_integrity([a, b])
    assert not bm.allocate_slots(seq([1] * 20), 20)  # 5 blocks wanted, 3 free: nothing taken
    assert bm.num_free_blocks == 3
    bm.free(a)
    bm.check_integrity([b])
    assert bm.num_free_blocks == 6 and a.block_table == []
    assert a.num_computed_tokens == len(
        a
    )  # the scheduler's field: the block manager never writes it


def test_prefix_hit_after_the_first_request_ended() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    prompt = list(range(1, 11))  # 10 tokens: two full blocks and a partial one
    first = seq(prompt)
    assert admit(bm, first) == 0
    bm.free(first)
    second = seq([*prompt, 99])
    assert admit(bm, second) == 8
    assert second.num_cached_tokens == 0  # the scheduler's to write, not the block manager's
    assert second.block_table[:2] == first.block_table[:2] or bm.prefix_cache_hits == 8
    assert bm.prefix_cache_queries == 10 + 11 and bm.prefix_cache_hits == 8
    bm.check_integrity([second])


def test_the_last_prompt_token_is_always_computed() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    admit(bm, seq(list(range(8))))
    again = seq(list(range(8)))  # exactly two full blocks, both cached
    assert bm.allocate_prefix(again) == 4  # the second block holds the last token
    assert again.num_computed_tokens == 0 and len(again.block_table) == 1


def test_shared_blocks_are_ref_counted() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    a, b = seq(list(range(9)), "a"), seq(list(range(9)), "b")
    admit(bm, a)
    admit(bm, b)
    assert a.block_table[:2] == b.block_table[:2]
    assert [bm.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]
    bm.check_integrity([a, b])
    bm.free(a)
    assert [bm.blocks[i].ref_count for i in b.block_table[:2]] == [1, 1]
    bm.check_integrity([b])


def test_eviction_is_lru_and_a_freed_sequence_is_evicted_tail_first() -> None:
    bm = BlockManager(num_blocks=6, block_size=2)
    old = seq([1, 2, 3, 4, 5], "old")  # blocks [1,2] [3,4] [5]
    admit(bm, old)
    bm.free(old)
    bm.check_integrity()
    # Never-used blocks and the unhashed partial block go first, then old's tail [3,4]
    # before its head [1,2].
    hashed = [bm.blocks[b].token_ids for b in bm.free_queue if bm.blocks[b].hash is not None]
    assert hashed == [(3, 4), (1, 2)]
    taker = seq(list(range(50, 60)), "taker")  # five blocks: all but the oldest-useful one
    assert bm.allocate_prefix(taker) == 0
    assert bm.allocate_slots(taker, 10)
    bm.check_integrity([taker])
    back = seq([1, 2, 3, 4, 7], "back")
    assert bm.allocate_prefix(back) == 2  # [1,2] survived, [3,4] was evicted


def test_a_hash_collision_never_returns_another_prefix() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, hash_fn=lambda _key: 42)
    admit(bm, seq([1, 2, 3, 4, 5]))
    other = seq([9, 9, 9, 9, 9])
    assert bm.allocate_prefix(other) == 0  # same hash, different tokens: a miss
    bm.check_integrity()


def test_disabled_prefix_caching_never_hits() -> None:
    bm = BlockManager(num_blocks=8, block_size=4, enable_prefix_caching=False)
    first = seq(list(range(9)))
    admit(bm, first)
    bm.free(first)
    again = seq(list(range(9)))
    assert bm.allocate_prefix(again) == 0 and bm.prefix_cache_hits == 0
