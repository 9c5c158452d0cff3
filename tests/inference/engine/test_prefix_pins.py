"""Pinned prefixes in the block manager: held out of eviction, capped, all or nothing."""

from __future__ import annotations

import pytest

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.block_manager import BlockManager
from inference.engine.prefix_pins import PinCapacityError, pin_id_of
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence
from inference.sampling.params import SamplingParams
from tests.inference.engine.test_block_manager import admit, seq

PROMPT = list(range(1, 11))  # block size 4: two full blocks and a partial one


def warmed(bm: BlockManager, tokens: list[int], request_id: str = "warm") -> Sequence:
    """A sequence that computed ``tokens`` and is still running."""
    s = seq(tokens, request_id)
    admit(bm, s)
    return s


def flood(bm: BlockManager, start: int = 1000) -> list[Sequence]:
    """Sequences of fresh tokens taking every allocatable block (evicting all cached ones)."""
    floods = []
    while bm.num_free_blocks:
        s = seq(list(range(start, start + 4)), f"flood{start}")
        admit(bm, s)
        floods.append(s)
        start += 4
    return floods


def hits(bm: BlockManager, tokens: list[int]) -> int:
    probe = seq(tokens, "probe")
    found = bm.allocate_prefix(probe)
    bm.free(probe)
    return found


def test_a_pin_holds_a_reference_on_each_full_block_and_unpin_drops_it() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    running = warmed(bm, PROMPT)
    pin = bm.pin(PROMPT)
    assert pin is not None and pin.pin_id == pin_id_of(PROMPT) and len(pin.pin_id) == 32
    assert pin.block_ids == tuple(running.block_table[:2])
    assert (pin.num_tokens, pin.pinned_tokens, pin.num_blocks) == (10, 8, 2)
    assert [bm.blocks[b].ref_count for b in pin.block_ids] == [2, 2]
    assert bm.num_pinned_blocks == 2
    bm.check_integrity([running])  # block-table refs + pin refs == ref_count
    bm.free(running)
    bm.check_integrity([])
    assert all(b not in bm.free_queue for b in pin.block_ids)
    with pytest.raises(ValueError, match="block-table entries and pins"):
        bm.blocks[pin.block_ids[0]].ref_count += 1
        bm.check_integrity([running])
    bm.blocks[pin.block_ids[0]].ref_count -= 1
    assert bm.unpin(pin.pin_id) == pin
    assert bm.num_pinned_blocks == 0 and not bm.pins
    # Back in the free queue with their hashes: still a hit until evicted.
    assert all(b in bm.free_queue and bm.blocks[b].hash is not None for b in pin.block_ids)
    bm.check_integrity([])
    assert hits(bm, [*PROMPT, 99]) == 8
    with pytest.raises(KeyError):
        bm.unpin(pin.pin_id)


def test_pinning_is_idempotent_per_content() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    bm.free(warmed(bm, PROMPT))
    first = bm.pin(PROMPT)
    again = bm.pin(list(PROMPT))
    assert first is again and len(bm.pins) == 1
    assert first is not None and [bm.blocks[b].ref_count for b in first.block_ids] == [1, 1]
    bm.check_integrity([])
    # Different content sharing the blocks is another pin; the blocks count once.
    other = bm.pin([*PROMPT[:8], 77])
    assert other is not None and other.pin_id != first.pin_id
    assert other.block_ids == first.block_ids and bm.num_pinned_blocks == 2
    assert [bm.blocks[b].ref_count for b in first.block_ids] == [2, 2]
    bm.check_integrity([])
    bm.unpin(first.pin_id)
    assert bm.num_pinned_blocks == 2  # still held by the other pin
    bm.unpin(other.pin_id)
    assert bm.num_pinned_blocks == 0
    bm.check_integrity([])


def test_only_verified_cached_blocks_are_pinned() -> None:
    bm = BlockManager(num_blocks=8, block_size=4)
    pin = bm.pin(PROMPT)  # nothing cached: an empty pin, nothing held
    assert pin is not None and pin.block_ids == () and pin.pinned_tokens == 0
    bm.unpin(pin.pin_id)
    assert bm.pin(PROMPT, only_if_cached=True) is None and not bm.pins
    bm.free(warmed(bm, PROMPT[:4]))  # only the first block is cached
    assert bm.pin(PROMPT, only_if_cached=True) is None and not bm.pins
    partial = bm.pin(PROMPT)
    assert partial is not None and partial.num_blocks == 1
    bm.check_integrity([])
    # A hash collision: same hash, other tokens, never pinned.
    colliding = BlockManager(num_blocks=8, block_size=4, hash_fn=lambda _key: 42)
    colliding.free(warmed(colliding, [9, 9, 9, 9, 9]))
    wrong = colliding.pin([1, 2, 3, 4, 5])
    assert wrong is not None and wrong.num_blocks == 0
    colliding.check_integrity([])


def test_a_pin_past_the_cap_is_refused_and_changes_nothing() -> None:
    bm = BlockManager(num_blocks=12, block_size=4, max_pinned_blocks=3)
    first = list(range(1, 9))  # two blocks
    second = list(range(20, 28))  # two more: 4 > 3
    bm.free(warmed(bm, first, "a"))
    bm.free(warmed(bm, second, "b"))
    assert bm.pin(first) is not None
    free_before = list(bm.free_queue)
    refs_before = [b.ref_count for b in bm.blocks]
    with pytest.raises(PinCapacityError) as refused:
        bm.pin(second)
    assert (refused.value.asked, refused.value.left, refused.value.cap) == (2, 1, 3)
    assert "2 more blocks" in str(refused.value) and "cap of 3" in str(refused.value)
    assert list(bm.free_queue) == free_before and [b.ref_count for b in bm.blocks] == refs_before
    assert len(bm.pins) == 1 and bm.num_pinned_blocks == 2
    bm.check_integrity([])
    # Checked before any prefill too: the blocks a warm-up would add count.
    with pytest.raises(PinCapacityError):
        bm.pin(list(range(40, 48)), only_if_cached=True)
    # Sharing the pinned blocks costs nothing new.
    assert bm.pin([*first, 5]) is not None and bm.num_pinned_blocks == 2
    bm.check_integrity([])


def test_the_cap_defaults_to_half_the_pool_and_is_zero_without_prefix_caching() -> None:
    assert BlockManager(num_blocks=10, block_size=4).max_pinned_blocks == 5
    off = BlockManager(num_blocks=10, block_size=4, enable_prefix_caching=False)
    assert off.max_pinned_blocks == 0
    off.free(warmed(off, PROMPT))
    with pytest.raises(PinCapacityError, match="prefix caching is disabled"):
        off.pin(PROMPT, only_if_cached=True)


def test_pinned_blocks_survive_a_flood_and_unpinned_ones_are_evicted() -> None:
    bm = BlockManager(num_blocks=10, block_size=4)
    bm.free(warmed(bm, PROMPT))
    pin = bm.pin(PROMPT)
    assert pin is not None
    floods = flood(bm)
    assert len(floods) == 8  # all but the two pinned blocks were taken
    bm.check_integrity(floods)
    for s in floods:
        bm.free(s)
    assert hits(bm, [*PROMPT, 99]) == 8
    bm.unpin(pin.pin_id)
    bm.check_integrity([])
    floods = flood(bm, start=5000)
    assert len(floods) == 10  # now evictable: the flood takes them too
    bm.check_integrity(floods)
    for s in floods:
        bm.free(s)
    assert hits(bm, [*PROMPT, 99]) == 0


def test_the_scheduler_keeps_room_for_requests_in_flight() -> None:
    config = SchedulerConfig(max_model_len=32)
    sched = Scheduler(config, CacheConfig(num_blocks=12, block_size=4, max_pinned_fraction=0.5))
    assert sched.block_manager.max_pinned_blocks == 6
    bm = sched.block_manager
    six_blocks = list(range(1, 25))
    bm.free(warmed(bm, six_blocks))
    big = Sequence("big", list(range(100, 108)), SamplingParams(max_tokens=24))  # 8 blocks
    sched.add(big)
    with pytest.raises(PinCapacityError, match="a request in flight may need 8"):
        sched.pin_prefix(six_blocks)
    assert not bm.pins
    sched.abort("big")
    assert sched.pin_prefix(six_blocks) is not None
    # Now the pool less the pins is too small for it: refused, never queued to stall.
    with pytest.raises(ValueError, match="less the 24 tokens pinned prefixes hold"):
        sched.add(Sequence("big2", list(range(100, 108)), SamplingParams(max_tokens=24)))
    sched.add(Sequence("fits", list(range(100, 108)), SamplingParams(max_tokens=16)))
