"""Pinned prefixes: what a pin is and how it is named (the block manager keeps them)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Pin:
    """A prefix whose full cached blocks are held out of eviction until it is unpinned.

    ``num_tokens``: the tokens asked to be pinned; ``pinned_tokens``: those in the pinned
    full blocks (``len(block_ids) * block_size``; the partial last block is never pinned).
    """

    pin_id: str
    num_tokens: int
    block_ids: tuple[int, ...]
    pinned_tokens: int

    @property
    def num_blocks(self) -> int:
        return len(self.block_ids)


class PinCapacityError(ValueError):
    """A pin refused, nothing changed: the cap or the room requests in flight need."""

    def __init__(self, message: str, *, asked: int, left: int, cap: int) -> None:
        super().__init__(message)
        self.asked = asked
        self.left = left
        self.cap = cap


def check_pin_room(
    *, asked: int, new: int, pinned: int, cap: int, unpinned_after: int, reserve: int, caching: bool
) -> None:
    """PinCapacityError unless ``new`` more pinned blocks (of a prefix's ``asked``) stay
    within ``cap`` and leave at least ``reserve`` blocks unpinned."""
    left = max(cap - pinned, 0)
    if pinned + new > cap:
        why = "" if caching else " (prefix caching is disabled)"
        raise PinCapacityError(
            f"pinning this prefix takes {new} more blocks (of its {asked}), but only {left} "
            f"of the cap of {cap} pinned blocks are left{why}",
            asked=new,
            left=left,
            cap=cap,
        )
    if unpinned_after < reserve:
        raise PinCapacityError(
            f"pinning this prefix takes {new} more blocks, which would leave {unpinned_after} "
            f"unpinned blocks, but a request in flight may need {reserve}",
            asked=new,
            left=left,
            cap=cap,
        )


PIN_ID_HEX_DIGITS = 32


def pin_id_of(token_ids: Sequence[int]) -> str:
    """A stable id of the token content: 32 hex digits of BLAKE2b over the ids."""
    data = b"".join(int(t).to_bytes(8, "little", signed=True) for t in token_ids)
    return hashlib.blake2b(data, digest_size=PIN_ID_HEX_DIGITS // 2).hexdigest()
