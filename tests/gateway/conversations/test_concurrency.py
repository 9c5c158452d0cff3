"""Appends that race on one conversation: each is numbered after the one before it."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from tests.gateway.conversations.people import People

Backend = tuple[str, People]


def test_racing_appends_all_land_in_order(backend: Backend) -> None:
    _, people = backend
    alice = people.alice
    path = f"/api/conversations/{alice.new()['id']}"

    def append(i: int) -> int:
        pair = [{"role": "user", "content": f"{i}a"}, {"role": "assistant", "content": f"{i}b"}]
        return alice.call("POST", f"{path}/messages", {"messages": pair}).status_code

    with ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(append, range(16)))
    assert statuses == [201] * 16
    messages = alice.ok("GET", path)["messages"]
    assert [m["position"] for m in messages] == list(range(32))
    # Each append's two messages stayed together, in its order.
    contents = [m["content"] for m in messages]
    assert sorted(contents[0::2]) == sorted(f"{i}a" for i in range(16))
    assert all(b == a[:-1] + "b" for a, b in zip(contents[0::2], contents[1::2], strict=True))
