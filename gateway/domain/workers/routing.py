"""Which worker takes a request: prefix affinity by rendezvous hashing, bounded by load.

Requests that share an affinity key (a system prompt, a prompt's opening) should land on
the same worker, because that worker's prefix cache already holds the key's KV blocks.
Rendezvous (highest-random-weight) hashing gives each key a stable order of preference
over the workers, with no table to share: every gateway replica computes the same order,
and taking a worker out only moves the keys that preferred it. Affinity yields to load:
when the preferred worker is more than ``slack`` requests busier than the least loaded
one, a cold cache is cheaper than the queue.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Protocol, TypeVar


class Candidate(Protocol):
    url: str
    in_flight: int


C = TypeVar("C", bound=Candidate)


def rendezvous_score(affinity: str, url: str) -> int:
    """A stable 64-bit weight for (key, worker): the same in every process and run.

    Python's ``hash()`` is salted per process, so replicas would disagree; blake2b is not.
    """
    digest = hashlib.blake2b(f"{url}\0{affinity}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rank(candidates: Sequence[C], affinity: str) -> list[C]:
    """``candidates`` from most to least preferred for ``affinity``."""
    return sorted(candidates, key=lambda c: rendezvous_score(affinity, c.url), reverse=True)


def choose(candidates: Sequence[C], affinity: str | None, *, slack: int, turn: int) -> C:
    """The worker for one request; ``candidates`` must not be empty.

    ``turn`` breaks ties between equally loaded workers round-robin when there is no
    affinity key. With a key, ties go to the key's next preference instead, so the
    fallback worker for a key is stable too and its cache warms as well.
    """
    if not candidates:
        raise ValueError("choose() needs at least one candidate")
    least = min(c.in_flight for c in candidates)
    if affinity is None:
        idle = [c for c in candidates if c.in_flight == least]
        return idle[turn % len(idle)]
    ranked = rank(candidates, affinity)
    preferred = ranked[0]
    if preferred.in_flight <= least + slack:
        return preferred
    return next(c for c in ranked if c.in_flight == least)
