"""The routing rule on its own: rendezvous affinity, bounded by load; no servers needed."""

from __future__ import annotations

from collections import Counter

from gateway.domain.workers.pool import Upstream
from gateway.domain.workers.routing import choose, rank, rendezvous_score

URLS = ["http://10.0.0.1:8100", "http://10.0.0.2:8100", "http://10.0.0.3:8100"]
KEYS = [f"You are assistant number {i}. Answer from the manual." for i in range(300)]


def workers(*loads: int) -> list[Upstream]:
    pairs = zip(URLS, loads, strict=True)
    return [Upstream(url, healthy=True, in_flight=load) for url, load in pairs]


def test_scores_are_stable_across_processes() -> None:
    # Pinned: Python's salted hash() would change per process, and replicas would disagree.
    assert rendezvous_score("a", "http://x") == 0x5806A20F26F2734C
    assert rendezvous_score("a", "http://x") != rendezvous_score("a", "http://y")


def test_keys_spread_evenly_over_workers() -> None:
    pool = workers(0, 0, 0)
    share = Counter(choose(pool, key, slack=4, turn=0).url for key in KEYS)
    assert set(share) == set(URLS)
    assert all(60 < n < 140 for n in share.values()), share  # 100 each, give or take


def test_removing_a_worker_moves_only_its_own_keys() -> None:
    three = workers(0, 0, 0)
    before = {key: choose(three, key, slack=4, turn=0).url for key in KEYS}
    two = [u for u in three if u.url != URLS[2]]
    after = {key: choose(two, key, slack=4, turn=0).url for key in KEYS}
    moved = {key for key in KEYS if before[key] != after[key]}
    assert moved == {key for key in KEYS if before[key] == URLS[2]}


def test_busy_preferred_worker_within_slack_keeps_the_key() -> None:
    key = KEYS[0]
    preferred = rank(workers(0, 0, 0), key)[0].url
    loads = [4 if url == preferred else 0 for url in URLS]
    assert choose(workers(*loads), key, slack=4, turn=0).url == preferred


def test_beyond_slack_goes_to_the_least_loaded_in_preference_order() -> None:
    key = KEYS[0]
    first, second, third = (u.url for u in rank(workers(0, 0, 0), key))
    loads = {first: 5, second: 0, third: 0}
    pool = workers(*(loads[url] for url in URLS))
    assert choose(pool, key, slack=4, turn=0).url == second  # tie 0/0: the next preference
    loads = {first: 5, second: 1, third: 0}
    pool = workers(*(loads[url] for url in URLS))
    assert choose(pool, key, slack=4, turn=0).url == third


def test_without_affinity_least_loaded_then_round_robin() -> None:
    assert choose(workers(3, 1, 2), None, slack=4, turn=0).url == URLS[1]
    idle = workers(0, 5, 0)
    picked = [choose(idle, None, slack=4, turn=turn).url for turn in range(4)]
    assert picked == [URLS[0], URLS[2], URLS[0], URLS[2]]
