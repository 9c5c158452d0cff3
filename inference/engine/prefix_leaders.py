"""Requests waiting for a prefix another request is computing (the time-budget policy).

When several people send the same long system prompt within a few seconds, the first
one's prefill registers the prompt's blocks chunk by chunk; a second request admitted
meanwhile would hit the blocks done so far and then prefill the rest itself, beside the
first: the same tokens computed twice, each copy getting half the time. Here a waiting
request whose next uncached block is the one a running prefill computes next (its
*leader*) is not admitted; it waits for that prefill, and reads the whole shared prefix
from the cache once it is done. And the leader's chunk counts its followers' weights
beside its own: it is the prefill of every one of them.

A follower is found by one chained block hash: block ``f`` (the leader's first block not
yet computed, counting the chunk scheduled in this step) is equal in both only if every
token before it is too. Followers are counted among the first ``FOLLOWERS_SCANNED`` of
each tenant's queue, so a step's cost does not grow with a long queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from inference.engine.block_manager import BlockManager
from inference.engine.sequence import Sequence

FOLLOWERS_SCANNED = 32


def leader_of(
    blocks: BlockManager,
    running: Iterable[Sequence],
    seq: Sequence,
    ends: Mapping[int, int],
) -> Sequence | None:
    """The running sequence whose prefill computes the next block ``seq`` would read
    from the cache, if any. ``ends``: seq id -> tokens computed after this step, for the
    sequences scheduled in it so far."""
    if not blocks.enable_prefix_caching or not seq.reads_prefix_cache:
        return None
    size = blocks.block_size
    full = (len(seq) - 1) // size  # the full blocks seq could take from the cache
    for leader in running:
        end = ends.get(leader.seq_id, leader.num_computed_tokens)
        frontier = end // size
        # A full block it has still to compute, as a prompt (not a decode's one token).
        if len(leader) - end <= 1 or frontier >= len(leader) // size or frontier >= full:
            continue
        if blocks.block_hash(seq, frontier) == blocks.block_hash(leader, frontier):
            return leader
    return None


def follower_weights(
    blocks: BlockManager, running: list[Sequence], waiting: Iterable[Sequence]
) -> dict[int, float]:
    """Leader seq id -> the summed weights of the waiting sequences that follow it."""
    prefilling = [s for s in running if len(s) - s.num_computed_tokens > 1]
    weights: dict[int, float] = {}
    if not prefilling:
        return weights
    for seq in waiting:
        leader = leader_of(blocks, prefilling, seq, {})
        if leader is not None:
            weights[leader.seq_id] = weights.get(leader.seq_id, 0.0) + seq.weight
    return weights
