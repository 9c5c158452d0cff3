"""The waiting queue: one FIFO per tenant, tenants served in proportion to their weights.

Each tenant carries a virtual clock that advances by ``1 / weight`` per admission; the
next admission goes to the waiting tenant whose clock is lowest (ties: earliest arrival).
A tenant that becomes active starts at the lowest clock among active tenants, so time
spent idle is not banked as credit, and a burst from one tenant cannot starve another.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from itertools import islice

from inference.engine.sequence import Sequence


class FairQueue:
    def __init__(self) -> None:
        self._queues: dict[str, deque[Sequence]] = {}
        self._clock: dict[str, float] = {}

    def __len__(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def __iter__(self) -> Iterator[Sequence]:
        for queue in self._queues.values():
            yield from queue

    def leading(self, n: int) -> Iterator[Sequence]:
        """The first ``n`` sequences of each tenant's queue."""
        for queue in self._queues.values():
            yield from islice(queue, n)

    def push(self, seq: Sequence) -> None:
        """A new arrival: at the back of its tenant's queue."""
        self._queue_for(seq.tenant).append(seq)

    def push_front(self, seq: Sequence) -> None:
        """A preempted sequence: ahead of its tenant's new arrivals."""
        self._queue_for(seq.tenant).appendleft(seq)

    def peek(self) -> Sequence | None:
        best: Sequence | None = None
        best_key: tuple[float, float] | None = None
        for tenant, queue in self._queues.items():
            head = queue[0]
            key = (self._clock[tenant], head.arrival_time)
            if best_key is None or key < best_key:
                best, best_key = head, key
        return best

    def heads(self) -> list[Sequence]:
        """Each waiting tenant's first sequence, in the order :meth:`peek` would serve
        them now (a policy may admit a later one first; :meth:`pop` charges whichever)."""
        order = sorted(
            self._queues, key=lambda t: (self._clock[t], self._queues[t][0].arrival_time)
        )
        return [self._queues[t][0] for t in order]

    def pop(self, seq: Sequence) -> None:
        """Remove ``seq``, the head of its tenant's queue (the one :meth:`peek` returned,
        or any of :meth:`heads`), and charge its tenant."""
        queue = self._queues[seq.tenant]
        queue.popleft()
        self._clock[seq.tenant] += 1.0 / seq.weight
        if not queue:
            del self._queues[seq.tenant]

    def remove(self, request_id: str) -> list[Sequence]:
        """Take every waiting sequence of a request out (an abort); no charge."""
        removed: list[Sequence] = []
        for tenant in list(self._queues):
            queue = self._queues[tenant]
            kept = deque(s for s in queue if s.request_id != request_id)
            removed.extend(s for s in queue if s.request_id == request_id)
            if kept:
                self._queues[tenant] = kept
            else:
                del self._queues[tenant]
        return removed

    def _queue_for(self, tenant: str) -> deque[Sequence]:
        queue = self._queues.get(tenant)
        if queue is None:
            active = [self._clock[t] for t in self._queues]
            floor = min(active) if active else max(self._clock.values(), default=0.0)
            self._clock[tenant] = max(self._clock.get(tenant, 0.0), floor)
            queue = self._queues[tenant] = deque()
        return queue
