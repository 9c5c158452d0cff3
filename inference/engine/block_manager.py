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
- A pin (see :meth:`BlockManager.pin`) holds one reference on each block of a prefix's
  verified cached chain, so a block's ``ref_count`` is its block-table entries plus the pins
  holding it. A pinned block is therefore never in the free queue, never evicted, and keeps
  its hash; at most ``max_pinned_blocks`` distinct blocks are pinned.

The block manager writes only block tables (and the block hashes it memoises); it returns
counts, and the scheduler writes a sequence's progress (``num_computed_tokens``).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from collections.abc import Sequence as Seq
from dataclasses import dataclass

from inference.engine.prefix_pins import Pin, check_pin_room, pin_id_of
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
        max_pinned_blocks: int | None = None,
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
        # Pins need the cache; by default at most half the pool is pinned.
        cap = num_blocks // 2 if max_pinned_blocks is None else max_pinned_blocks
        self.max_pinned_blocks = max(0, min(cap, num_blocks)) if enable_prefix_caching else 0
        self.pins: dict[str, Pin] = {}
        self._pin_refs: Counter[int] = Counter()  # block id -> pins holding it
        # Registered by the step being scheduled, whose K/V is not written yet.
        self._unwritten: list[Block] = []

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

    @property
    def num_pinned_blocks(self) -> int:
        """Distinct blocks held by pins (a block two pins share counts once)."""
        return len(self._pin_refs)

    # -- allocation -----------------------------------------------------------------------

    def allocate_prefix(self, seq: Sequence) -> int:
        """Give a sequence without blocks its longest cached prefix of full blocks; return
        how many tokens those blocks hold (the scheduler records them as computed).

        At least the last token is left to compute, since the step needs its logits. A
        sequence that does not read the cache (``seq.reads_prefix_cache``) takes nothing.
        """
        if seq.block_table:
            raise ValueError(f"sequence {seq.seq_id} already has blocks")
        if not self.enable_prefix_caching or not seq.reads_prefix_cache:
            return 0
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
        return len(hits) * self.block_size

    def record_lookup(self, seq: Sequence) -> None:
        """Count an admitted sequence's first prefix lookup (re-admissions are not new)."""
        if seq.num_preemptions == 0 and self.enable_prefix_caching:
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
            self._unwritten.append(block)

    def step_written(self) -> None:
        """The step ran: the blocks it registered hold their K/V."""
        self._unwritten.clear()

    def step_failed(self) -> None:
        """The step raised before (or while) writing its K/V: the blocks it registered hold
        nothing valid, so no later request may hit them. Their sequences are aborted next."""
        for block in self._unwritten:
            self._forget(block)
        self._unwritten.clear()

    def truncate(self, seq: Sequence, num_tokens: int) -> None:
        """Release the blocks past the first ``num_tokens`` tokens (the slots of rejected
        speculative tokens), tail first; the blocks kept are the sequence's own."""
        keep = self.blocks_needed(num_tokens)
        tail = seq.block_table[keep:]
        del seq.block_table[keep:]
        for block_id in reversed(tail):
            self._release_block(self.blocks[block_id])

    def free(self, seq: Sequence) -> None:
        """Release a sequence's blocks, tail first, so its tail is evicted first."""
        for block_id in reversed(seq.block_table):
            self._release_block(self.blocks[block_id])
        seq.block_table = []

    def _release_block(self, block: Block) -> None:
        block.ref_count -= 1
        if block.ref_count == 0:
            self.free_queue[block.block_id] = None
            if block.hash is None:  # holds nothing reusable: hand it out first
                self.free_queue.move_to_end(block.block_id, last=False)

    # -- pins -----------------------------------------------------------------------------

    def pin(
        self, token_ids: Seq[int], *, reserve_blocks: int = 0, only_if_cached: bool = False
    ) -> Pin | None:
        """Pin the verified cached chain of ``token_ids``'s full blocks; the same tokens
        pinned again return the existing pin (one pin per content).

        All or nothing: raises :class:`PinCapacityError`, changing nothing, when the pinned
        blocks would pass ``max_pinned_blocks`` or leave fewer than ``reserve_blocks``
        unpinned (what a request in flight may need). With ``only_if_cached``, pins (and
        returns) only when every full block is cached; otherwise returns None, after the
        same checks for the blocks a prefill would add, so that a refused pin costs none.
        """
        pin_id = pin_id_of(token_ids)
        existing = self.pins.get(pin_id)
        if existing is not None:
            return existing
        num_full = len(token_ids) // self.block_size
        chain = self._cached_chain(token_ids, num_full)
        new = sum(1 for block in chain if block.block_id not in self._pin_refs)
        if only_if_cached and len(chain) < num_full:
            self._check_pin_room(num_full, new + num_full - len(chain), reserve_blocks)
            return None
        self._check_pin_room(len(chain), new, reserve_blocks)
        for block in chain:
            self._take(block)
            self._pin_refs[block.block_id] += 1
        pin = Pin(
            pin_id,
            num_tokens=len(token_ids),
            block_ids=tuple(block.block_id for block in chain),
            pinned_tokens=len(chain) * self.block_size,
        )
        self.pins[pin_id] = pin
        return pin

    def unpin(self, pin_id: str) -> Pin:
        """Drop a pin's references (KeyError if unknown); its blocks that no one else holds
        go back to the free queue keeping their hash, tail first, so they stay reusable
        until evicted like any freed sequence's."""
        pin = self.pins.pop(pin_id)
        for block_id in reversed(pin.block_ids):
            self._pin_refs[block_id] -= 1
            if self._pin_refs[block_id] == 0:
                del self._pin_refs[block_id]
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[block_id] = None
        return pin

    def _cached_chain(self, token_ids: Seq[int], num_full: int) -> list[Block]:
        """The leading full blocks of ``token_ids`` that are cached, tokens compared."""
        chain: list[Block] = []
        parent: int | None = None
        for index in range(num_full):
            tokens = tuple(token_ids[index * self.block_size : (index + 1) * self.block_size])
            parent = self._hash((parent, tokens))
            block = self.cached.get(parent)
            if block is None or block.token_ids != tokens:
                break
            chain.append(block)
        return chain

    def _check_pin_room(self, asked: int, new: int, reserve_blocks: int) -> None:
        check_pin_room(
            asked=asked,
            new=new,
            pinned=self.num_pinned_blocks,
            cap=self.max_pinned_blocks,
            unpinned_after=self.num_blocks - self.num_pinned_blocks - new,
            reserve=reserve_blocks,
            caching=self.enable_prefix_caching,
        )

    def block_hash(self, seq: Sequence, index: int) -> int:
        """The chained hash of ``seq``'s full block ``index`` (memoised on the sequence)."""
        if not 0 <= index < len(seq) // self.block_size:
            raise ValueError(f"sequence {seq.seq_id} has no full block {index}")
        return self._block_hashes(seq, index + 1)[index]

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

    def check_integrity(self, sequences: Iterable[Sequence] | None = None) -> None:
        """Raise ValueError naming the first broken invariant (tests call it after each op).

        Given ``sequences`` (every one holding blocks; ``[]``: none), each block's
        ``ref_count`` must also equal its block-table entries plus the pins holding it.
        """
        refs = [0] * self.num_blocks
        for seq in sequences or ():
            for block_id in seq.block_table:
                refs[block_id] += 1
        self._check_pins()
        for block_id, count in self._pin_refs.items():
            refs[block_id] += count
        for block in self.blocks:
            in_free = block.block_id in self.free_queue
            if (block.ref_count == 0) != in_free:
                raise ValueError(f"block {block.block_id}: ref {block.ref_count}, free {in_free}")
            if sequences is not None and refs[block.block_id] != block.ref_count:
                raise ValueError(
                    f"block {block.block_id}: ref_count {block.ref_count} but "
                    f"{refs[block.block_id]} block-table entries and pins"
                )
            if block.hash is not None and self.cached.get(block.hash) is not block:
                raise ValueError(f"block {block.block_id} has a hash the cache does not map")
        for block_hash, block in self.cached.items():
            if block.hash != block_hash:
                raise ValueError(f"cache entry {block_hash} maps block {block.block_id}")

    def _check_pins(self) -> None:
        held = Counter(block_id for pin in self.pins.values() for block_id in pin.block_ids)
        if held != self._pin_refs:
            raise ValueError(f"pin references {dict(self._pin_refs)} but pins hold {dict(held)}")
        if self.num_pinned_blocks > self.max_pinned_blocks:
            raise ValueError(f"{self.num_pinned_blocks} blocks pinned, over the cap")
        for block_id in self._pin_refs:
            block = self.blocks[block_id]
            if block.hash is None or block.ref_count < self._pin_refs[block_id]:
                raise ValueError(
                    f"pinned block {block_id}: hash {block.hash}, ref {block.ref_count}"
                )
