"""/v1/internal/prefixes on a worker with a small KV pool: warm, pinned, capped, deleted.

Hits are read from what the engine reports (usage's cached_tokens, the prefix-cache
counters on /metrics), never from timings.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from inference.server.app import create_app
from inference.server.settings import ServerSettings
from tests.inference.checkpoints import CORPUS
from tests.inference.server.conftest import API_KEY, MODEL, metric, serving, tiny_engine

BLOCK = 16
NUM_BLOCKS = 64  # 1024 tokens: a few long prompts evict all of it
CAP = 16  # max_pinned_fraction 0.25
BYTES_PER_TOKEN = 512  # the tiny llama: 2 layers x K,V x 2 heads x 16 dims x float32
PATH = "/v1/internal/prefixes"
HEX_ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture(scope="module")
def pin_worker(checkpoint: Path) -> Iterator[str]:
    engine = tiny_engine(
        checkpoint,
        kv_cache_memory_bytes=NUM_BLOCKS * BLOCK * BYTES_PER_TOKEN,
        max_pinned_fraction=CAP / NUM_BLOCKS,
    )
    assert engine.scheduler.block_manager.num_blocks == NUM_BLOCKS
    assert engine.scheduler.block_manager.max_pinned_blocks == CAP
    settings = ServerSettings(served_model_name=MODEL, api_key=API_KEY)
    with serving(create_app(engine, settings)) as url:
        yield url


@pytest.fixture
def api(pin_worker: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(base_url=pin_worker, headers=headers, timeout=120) as client:
        yield client
        for prefix in client.get(PATH).json()["data"]:  # each test starts with no pins
            assert client.delete(f"{PATH}/{prefix['id']}").status_code == 200


def system_prompt(client: httpx.Client, tag: str, low: int = 200, high: int = 215) -> str:
    """A system prompt whose rendered message is ``low`` to ``high`` tokens, unique by tag."""
    words = f"{tag} {CORPUS * 4}".split()
    for n in range(len(words), 0, -1):
        text = " ".join(words[:n])
        if low <= num_tokens(client, [{"role": "system", "content": text}]) <= high:
            return text
    raise AssertionError("no prefix of the corpus renders to the wanted length")


def num_tokens(client: httpx.Client, messages: list[dict[str, str]]) -> int:
    body = {"messages": messages, "add_generation_prompt": False}
    count: int = client.post("/tokenize", json=body).json()["count"]
    return count


def warm(client: httpx.Client, system: str) -> dict[str, Any]:
    reply = client.post(PATH, json={"messages": [{"role": "system", "content": system}]})
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def chat(client: httpx.Client, system: str) -> tuple[int, str]:
    """(cached prompt tokens, greedy reply) of a chat that starts with ``system``."""
    messages = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Measure the bore."},
    ]
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": 4,
        "temperature": 0,
        "ignore_eos": True,
    }
    reply = client.post("/v1/chat/completions", json=body)
    assert reply.status_code == 200, reply.text
    answer = reply.json()
    cached: int = answer["usage"]["prompt_tokens_details"]["cached_tokens"]
    return cached, answer["choices"][0]["message"]["content"]


def chat_cached_tokens(client: httpx.Client, system: str) -> int:
    return chat(client, system)[0]


def flood(client: httpx.Client, seed: int, count: int = 6) -> None:
    """Unrelated 240-token prompts, 15 blocks each: more than the whole pool in all."""
    rng = random.Random(seed)
    for _ in range(count):
        prompt = [rng.randrange(3, 384) for _ in range(240)]
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
        assert client.post("/v1/completions", json=body).status_code == 200


def metrics(client: httpx.Client, name: str) -> float:
    return metric(client.get("/metrics").text, name, model=MODEL)


def test_a_warmed_system_prompt_is_a_full_hit_for_a_chat(api: httpx.Client) -> None:
    system = system_prompt(api, "Inspector")
    n = num_tokens(api, [{"role": "system", "content": system}])
    queries = metrics(api, "inference_prefix_cache_queries_total")
    prefix = warm(api, system)
    assert HEX_ID.fullmatch(prefix["id"]) and prefix["object"] == "prefix"
    assert prefix["num_tokens"] == n
    assert prefix["pinned_blocks"] == n // BLOCK and prefix["pinned_tokens"] == n // BLOCK * BLOCK
    assert prefix["cached_tokens"] == 0
    assert metrics(api, "inference_prefix_cache_queries_total") == queries + n  # one prefill
    assert metrics(api, "inference_prefix_cache_pinned_blocks") == prefix["pinned_blocks"]
    assert metrics(api, "inference_prefix_cache_pinned_prefixes") == 1
    assert metrics(api, "inference_prefix_cache_max_pinned_blocks") == CAP

    hits = metrics(api, "inference_prefix_cache_hits_total")
    assert chat_cached_tokens(api, system) == prefix["pinned_tokens"]
    assert metrics(api, "inference_prefix_cache_hits_total") == hits + prefix["pinned_tokens"]

    # Warming the same content again: the same pin, no prefill (no lookup counted).
    queries = metrics(api, "inference_prefix_cache_queries_total")
    again = warm(api, system)
    assert again == {**prefix, "cached_tokens": prefix["pinned_tokens"]}
    assert metrics(api, "inference_prefix_cache_queries_total") == queries
    listing = api.get(PATH).json()
    assert listing == {
        "object": "list",
        "data": [{k: prefix[k] for k in ("id", "num_tokens", "pinned_tokens", "pinned_blocks")}],
        "pinned_blocks": prefix["pinned_blocks"],
        "max_pinned_blocks": CAP,
    }


def test_pinned_blocks_survive_a_flood_until_deleted(api: httpx.Client) -> None:
    system = system_prompt(api, "Auditor")
    prefix = warm(api, system)
    pinned = prefix["pinned_tokens"]
    cached, reply = chat(api, system)
    assert cached == pinned
    flood(api, seed=1)
    # The flood never wrote into the pinned blocks: the same hit, the same greedy reply.
    assert chat(api, system) == (pinned, reply)

    reply = api.delete(f"{PATH}/{prefix['id']}")
    assert reply.status_code == 200
    assert reply.json() == {
        "id": prefix["id"],
        "object": "prefix",
        "deleted": True,
        "unpinned_blocks": prefix["pinned_blocks"],
    }
    assert metrics(api, "inference_prefix_cache_pinned_blocks") == 0
    assert api.get(PATH).json()["data"] == []
    assert chat_cached_tokens(api, system) >= pinned  # unpinned, but still cached
    flood(api, seed=2)
    assert chat_cached_tokens(api, system) == 0  # evicted like any other block
    assert api.delete(f"{PATH}/{prefix['id']}").status_code == 404


def test_a_pin_past_the_cap_is_409_and_changes_nothing(api: httpx.Client) -> None:
    first = warm(api, system_prompt(api, "Welder"))
    assert first["pinned_blocks"] > CAP // 2  # 13 of 16: no room for another
    queries = metrics(api, "inference_prefix_cache_queries_total")
    system = system_prompt(api, "Machinist")
    reply = api.post(PATH, json={"messages": [{"role": "system", "content": system}]})
    assert reply.status_code == 409, reply.text
    error = reply.json()["error"]
    assert error["code"] == "pin_capacity_exceeded"
    left = CAP - first["pinned_blocks"]
    assert f"only {left} of the cap of {CAP}" in error["message"]
    assert re.search(r"takes \d+ more blocks", error["message"])
    # Refused before any prefill, and nothing pinned.
    assert metrics(api, "inference_prefix_cache_queries_total") == queries
    assert [p["id"] for p in api.get(PATH).json()["data"]] == [first["id"]]
    assert metrics(api, "inference_prefix_cache_pinned_blocks") == first["pinned_blocks"]


def test_prompt_and_token_id_bodies_name_the_same_content_alike(api: httpx.Client) -> None:
    system = system_prompt(api, "Planner")
    by_messages = warm(api, system)
    ids = api.post(
        "/tokenize",
        json={"messages": [{"role": "system", "content": system}], "add_generation_prompt": False},
    ).json()["tokens"]
    by_ids = api.post(PATH, json={"prompt_token_ids": ids, "model": MODEL}).json()
    assert by_ids["id"] == by_messages["id"] and by_ids["cached_tokens"] == by_ids["pinned_tokens"]
    text = "The operator measures the bore, records the value and signs the sheet."
    by_text = api.post(PATH, json={"prompt": text}).json()
    expected = api.post("/tokenize", json={"prompt": text}).json()["count"]
    assert by_text["num_tokens"] == expected and by_text["id"] != by_messages["id"]
    assert len(api.get(PATH).json()["data"]) == 2


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"model": MODEL},
        {"prompt": "a", "prompt_token_ids": [5]},
        {"messages": [{"role": "system", "content": "x"}], "prompt": "a"},
        {"prompt": 5},
        {"prompt": ""},
        {"messages": []},
        {"messages": [{"role": "wizard", "content": "x"}]},
        {"prompt_token_ids": []},
        {"prompt_token_ids": [-1]},
        {"prompt_token_ids": [384]},
        {"prompt_token_ids": ["a"]},
        {"prompt_token_ids": [7] * 256},
        {"prompt": "hi", "max_tokens": 3},
        {"prompt": "hi", "model": "other"},
        [1, 2],
    ],
)
def test_bad_bodies_are_400(api: httpx.Client, body: Any) -> None:
    reply = api.post(PATH, json=body)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert api.get(PATH).json()["data"] == []


def test_not_json_is_400(api: httpx.Client) -> None:
    reply = api.post(PATH, content=b"{nope", headers={"content-type": "application/json"})
    assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_json"


@pytest.mark.parametrize("pin_id", ["0" * 32, "not-hex", "A" * 32, "x" * 500, "%2e%2e", "é"])
def test_unknown_or_malformed_ids_are_404(api: httpx.Client, pin_id: str) -> None:
    reply = api.delete(f"{PATH}/{pin_id}")
    assert reply.status_code == 404, reply.text
    assert reply.json()["error"]["type"] == "not_found_error"


def test_every_prefix_route_needs_the_token(pin_worker: str) -> None:
    body = {"prompt": "The quick brown fox"}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        with httpx.Client(base_url=pin_worker, headers=headers, timeout=60) as client:
            for reply in (
                client.post(PATH, json=body),
                client.get(PATH),
                client.delete(f"{PATH}/{'0' * 32}"),
            ):
                assert reply.status_code == 401
                assert reply.json()["error"]["code"] == "invalid_api_key"
    with httpx.Client(base_url=pin_worker, timeout=60) as client:
        assert metric(client.get("/metrics").text, "inference_prefix_cache_pinned_prefixes") == 0
