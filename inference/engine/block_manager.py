"""The paged KV block pool with automatic prefix caching. No tensors: block ids only.

Invariants (checked by :meth:`BlockManager.check_integrity`):

- Every block is either in use (``ref_count > 0``) or in the free queue (``ref_count ==
  0``), never both. The free queue is ordered least-recently-useful first: allocation
  takes from its front, so it is also the eviction order.
- A block carries a hash only when it is full and registered; then ``cached[hash]`` is
  that block. A block with a hash may sit in the free queue: its KV is still valid and a
  later sequence with the same prefix takes it back instead of recomputing it.
- A block's hash chains its parent's: ``hash((parent_hash, tokens))``, so equal hashes
  mean equal prefixes up to collisions; a hit is confirmed by comparing the tokens.
- ``seq.block_table`` covers at least ``seq.num_computed_tokens`` tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from inference.engine.sequence import Sequence

HashFn = Callable[[tuple[int | None, tuple[int, ...]]], int]


@dataclass(eq=False, slots=True)
class Block:
    block_id: int
    ref_count: int = 0
    hash: int | None = None
    token_ids: tuple[int, ...] = ()  # the tokens behind ``hash``, for the equality check


class BlockManager:
    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        enable_prefix_caching: bool = True,
        hash_fn: HashFn = hash,
    ) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self._hash = hash_fn
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self.cached: dict[int, Block] = {}
        self.prefix_cache_queries = 0  # prompt tokens looked up
        self.prefix_cache_hits = 0  # of those, tokens found cached

    # -- sizes ----------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        """Blocks that can be handed out now (cached-but-unused blocks count: evictable)."""
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        return 1.0 - len(self.free_queue) / self.num_blocks

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_needed(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    # -- allocation -----------------------------------------------------------------------

    def allocate_prefix(self, seq: Sequence) -> None:
        """Give a sequence without blocks its longest cached prefix of full blocks.

        At least the last token is left to compute, since the step needs its logits. A
        sequence that does not read the cache (``seq.reads_prefix_cache``) takes nothing.
        """
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        if not self.enable_prefix_caching or not seq.reads_prefix_cache:
            return
        num_full = (len(seq) - 1) // self.block_size
        hashes = self._block_hashes(seq, num_full)
        hits: list[Block] = []
        for index, block_hash in enumerate(hashes):
            block = self.cached.get(block_hash)
            if block is None or block.token_ids != self._block_tokens(seq, index):
                break
            hits.append(block)
        for block in hits:
            self._take(block)
            seq.block_table.append(block.block_id)
        seq.num_computed_tokens = len(hits) * self.block_size

    def record_lookup(self, seq: Sequence) -> None:
        """Count an admitted sequence's first prefix lookup (re-admissions are not new)."""
        if seq.num_preemptions == 0 and self.enable_prefix_caching:
            seq.num_cached_tokens = seq.num_computed_tokens
            self.prefix_cache_queries += len(seq)
            self.prefix_cache_hits += seq.num_computed_tokens

    def allocate_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Make the block table cover ``num_computed_tokens + num_new_tokens`` tokens.

        All or nothing: returns False, changing nothing, when too few blocks are free.
        """
        needed = self.blocks_needed(seq.num_computed_tokens + num_new_tokens)
        missing = needed - len(seq.block_table)
        if missing > len(self.free_queue):
            return False
        for _ in range(missing):
            block_id, _ = self.free_queue.popitem(last=False)
            block = self.blocks[block_id]
            self._forget(block)
            block.ref_count = 1
            seq.block_table.append(block_id)
        return True

    def register_full_blocks(self, seq: Sequence, num_tokens: int) -> None:
        """Enter the full blocks among the first ``num_tokens`` tokens into the cache.

        Called when the step that computes those tokens is scheduled: the runner writes a
        layer's new K/V before that layer reads the cache, so a sequence scheduled later in
        the same step may already attend to them.
        """
        if not self.enable_prefix_caching:
            return
        num_full = min(num_tokens // self.block_size, len(seq.block_table))
        for index, block_hash in enumerate(self._block_hashes(seq, num_full)):
            block = self.blocks[seq.block_table[index]]
            if block.hash is not None or block_hash in self.cached:
                continue  # already registered, or a twin block holds this prefix
            block.hash = block_hash
            block.token_ids = self._block_tokens(seq, index)
            self.cached[block_hash] = block

    def free(self, seq: Sequence) -> None:
        """Release a sequence's blocks, tail first, so its tail is evicted first."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[block_id] = None
                if block.hash is None:  # holds nothing reusable: hand it out first
                    self.free_queue.move_to_end(block_id, last=False)
        seq.block_table = []
        seq.num_computed_tokens = 0

    # -- internals ------------------------------------------------------------------------

    def _take(self, block: Block) -> None:
        if block.ref_count == 0:
            del self.free_queue[block.block_id]
        block.ref_count += 1

    def _forget(self, block: Block) -> None:
        """Evict a block's cached identity before it is reused for other tokens."""
        if block.hash is not None:
            if self.cached.get(block.hash) is block:
                del self.cached[block.hash]
            block.hash = None
            block.token_ids = ()

    def _block_tokens(self, seq: Sequence, index: int) -> tuple[int, ...]:
        start = index * self.block_size
        return tuple(seq.token_ids[start : start + self.block_size])

    def _block_hashes(self, seq: Sequence, num_blocks: int) -> list[int]:
        """Chained hashes of the sequence's first ``num_blocks`` full blocks (memoised)."""
        hashes = seq.block_hashes
        while len(hashes) < num_blocks:
            parent = hashes[-1] if hashes else None
            hashes.append(self._hash((parent, self._block_tokens(seq, len(hashes)))))
        return hashes[:num_blocks]

    def check_integrity(self, sequences: Iterable[Sequence] = ()) -> None:
        """Raise ValueError naming the first broken invariant (tests call it after each op)."""
        refs = [0] * self.num_blocks
        for seq in sequences:
            for block_id in seq.block_table:
                refs[block_id] += 1
        for block in self.blocks:
            in_free = block.block_id in self.free_queue
            if (block.ref_count == 0) != in_free:
                raise ValueError(f"block {block.block_id}: ref {block.ref_count}, free {in_free}")
            if sequences and refs[block.block_id] != block.ref_count:
                raise ValueError(
                    f"block {block.block_id}: ref_count {block.ref_count} but "
                    f"{refs[block.block_id]} block-table entries"
                )
            if block.hash is not None and self.cached.get(block.hash) is not block:
                raise ValueError(f"block {block.block_id} has a hash the cache does not map")
        for block_hash, block in self.cached.items():
            if block.hash != block_hash:
                raise ValueError(f"cache entry {block_hash} maps block {block.block_id}")
