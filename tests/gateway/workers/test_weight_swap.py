"""A weight swap of the supervised worker under a steady stream of requests (the official
openai client through a real gateway, two real workers on tiny checkpoints): nothing is
lost, no stream is cut, and the swap is audited; then the one-at-a-time fallback, whose
gap answers 503 with Retry-After, renames the model."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from gateway import cli
from gateway.domain.workers.supervisor import WorkerSupervisor
from tests.gateway.traffic.conftest import (
    WORKER_TOKEN,
    RunningGateway,
    read_records,
    running_gateway,
)
from tests.gateway.workers.test_supervisor import TINY_ARGS
from tests.inference.server.conftest import free_port

CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tests.inference.checkpoints import make_checkpoint

    first = make_checkpoint("llama", tmp_path_factory.mktemp("swap") / "tiny-a", seed=1)
    second = make_checkpoint("llama", tmp_path_factory.mktemp("swap") / "tiny-b", seed=2)
    return first, second


@pytest.fixture
def gateway(tmp_path: Path, checkpoints: tuple[Path, Path]) -> Iterator[RunningGateway]:
    supervisor = WorkerSupervisor(
        checkpoints[0], free_port(), WORKER_TOKEN, served_name="tiny", log_dir=tmp_path,
        extra_args=TINY_ARGS,
    )  # fmt: skip
    with running_gateway(tmp_path, [], app_options={"supervisor": supervisor}) as running:
        yield running


def admin(gateway: RunningGateway) -> httpx.Client:
    client = httpx.Client(base_url=gateway.url, timeout=30)
    signed = client.post(
        "/auth/local/login", json={"email": "root@example.test", "password": gateway.admin_password}
    )
    assert signed.status_code == 200, signed.text
    client.headers["x-csrf-token"] = signed.json()["csrf_token"]
    return client


def worker(console: httpx.Client) -> dict[str, Any]:
    """The worker at index 0 (while a swap runs, the new one is listed beside it)."""
    workers = console.get("/api/admin/workers").json()["workers"]
    return dict(next(w for w in workers if w["index"] == 0))


def until(read: Any, want: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while not want(found := read()):
        assert time.monotonic() < deadline, f"not in time; last: {found}"
        time.sleep(0.1)
    return found


def worker_records(gateway: RunningGateway) -> list[dict[str, Any]]:
    records = asyncio.run(read_records(gateway.settings.effective_database_url, None))
    return [r for r in records if r["action"].startswith("worker.")]


class Stream:
    """Threads asking without pause, streams and unary in turn, until stopped."""

    def __init__(self, client: openai.OpenAI, model: str, threads: int = 4) -> None:
        self.client, self.model = client, model
        self.done = {"stream": 0, "unary": 0}
        self.failures: list[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(i,)) for i in range(threads)]

    def _run(self, i: int) -> None:
        turn = i
        while not self.stop.is_set():
            turn += 1
            try:
                if turn % 2:
                    chunks = list(
                        self.client.chat.completions.create(
                            model=self.model, messages=CHAT, max_tokens=24, stream=True
                        )
                    )
                    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
                    if not finish or finish[-1] is None:
                        self.failures.append(f"stream cut after {len(chunks)} chunks")
                        continue
                    self.done["stream"] += 1
                else:
                    reply = self.client.chat.completions.create(
                        model=self.model, messages=CHAT, max_tokens=8
                    )
                    assert reply.choices[0].finish_reason is not None
                    self.done["unary"] += 1
            except Exception as exc:
                self.failures.append(repr(exc))

    def __enter__(self) -> Stream:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def test_a_weight_swap_under_load_loses_nothing(
    gateway: RunningGateway, checkpoints: tuple[Path, Path]
) -> None:
    console = admin(gateway)
    first = until(lambda: worker(console), lambda w: w["healthy"] and w["supervised"])
    client = gateway.client(gateway.department("quality"), timeout=60)
    with Stream(client, "tiny") as stream:
        until(lambda: sum(stream.done.values()), lambda n: n >= 8, timeout=60)
        reply = console.post(
            "/api/admin/workers/0/reload", json={"model": str(checkpoints[1]), "name": "tiny"}
        )
        assert reply.status_code == 202 and reply.json()["reloading"] is True, reply.text
        again = console.post("/api/admin/workers/0/reload", json={"model": str(checkpoints[1])})
        assert again.status_code == 409 and "already reloading" in again.json()["detail"]
        after = until(lambda: worker(console), lambda w: not w["reloading"])
        served = sum(stream.done.values())
        until(lambda: sum(stream.done.values()), lambda n: n >= served + 8, timeout=60)
    assert stream.failures == []
    assert stream.done["stream"] >= 4 and stream.done["unary"] >= 4
    # A new worker on another port took the old one's place (and index) in the pool.
    assert after["url"] != first["url"] and after["healthy"] and after["models"] == ["tiny"]
    assert after["index"] == 0 and after["draining"] is False
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{first['url']}/ready", timeout=2)

    # One at a time, the name kept: the requests that come in the gap wait for the new
    # worker and are served by it; none fails.
    with Stream(client, "tiny") as stream:
        until(lambda: sum(stream.done.values()), lambda n: n >= 4, timeout=60)
        reply = console.post(
            "/api/admin/workers/0/reload",
            json={"model": str(checkpoints[0]), "name": "tiny", "one_at_a_time": True},
        )
        assert reply.status_code == 202, reply.text
        until(lambda: worker(console), lambda w: not w["healthy"], timeout=60)  # the gap
        gap_done = sum(stream.done.values())
        final = until(lambda: worker(console), lambda w: not w["reloading"] and w["healthy"])
        until(lambda: sum(stream.done.values()), lambda n: n >= gap_done + 8, timeout=60)
    assert stream.failures == []
    assert final["url"] == after["url"] and final["models"] == ["tiny"]

    # One at a time, renamed (the stem of the new path): a request for the old name that
    # comes in the gap waits, and once the swap is over gets the 404 of a model that is
    # no longer served.
    reply = console.post(
        "/api/admin/workers/0/reload",
        json={"model": str(checkpoints[1]), "one_at_a_time": True},
    )
    assert reply.status_code == 202, reply.text
    until(lambda: worker(console), lambda w: not w["healthy"], timeout=60)
    gap = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "tiny", "messages": CHAT, "max_tokens": 2},
        headers={"authorization": f"Bearer {client.api_key}"},
        timeout=60,
    )
    assert gap.status_code == 404 and gap.json()["error"]["code"] == "model_not_found", gap.text
    assert not worker(console)["reloading"]  # answered only once the swap was over
    renamed = until(lambda: worker(console), lambda w: w["healthy"])
    assert renamed["models"] == ["tiny-b"]
    assert [m.id for m in client.models.list().data] == ["tiny-b"]
    answer = client.chat.completions.create(model="tiny-b", messages=CHAT, max_tokens=4)
    assert answer.choices[0].message.content is not None

    # The audit writer stores records in the background: the last one may land a moment
    # after the swap reports itself done.
    swaps = until(lambda: worker_records(gateway), lambda found: len(found) >= 6, timeout=30)
    assert [(r["action"], r["user_email"]) for r in swaps] == [
        ("worker.reload", "root@example.test"),
        ("worker.reloaded", "system"),
    ] * 3
    outcomes = [json.loads(r["details"]) for r in swaps[1::2]]
    assert [(o["ok"], o["name"], o["one_at_a_time"]) for o in outcomes] == [
        (True, "tiny", False),
        (True, "tiny", True),
        (True, "tiny-b", True),
    ]


def test_reload_refuses_bad_input(gateway: RunningGateway, tmp_path: Path) -> None:
    console = admin(gateway)
    until(lambda: worker(console), lambda w: w["healthy"])
    for body in (
        {"model": "relative/path"},
        {"model": str(tmp_path / "none")},
        {},
        {"model": "/x", "name": "bad name"},
    ):
        reply = console.post("/api/admin/workers/0/reload", json=body)
        assert reply.status_code == 400, (body, reply.text)
    assert console.post("/api/admin/workers/5/reload", json={"model": "/"}).status_code == 404
    anonymous = httpx.post(f"{gateway.url}/api/admin/workers/0/reload", json={"model": "/"})
    assert anonymous.status_code == 401


def test_the_cli_swaps_and_says_when_a_swap_failed(
    gateway: RunningGateway,
    checkpoints: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    console = admin(gateway)
    first = until(lambda: worker(console), lambda w: w["healthy"] and w["supervised"])
    secret = tmp_path / "password"
    secret.write_text(gateway.admin_password + "\n")
    common = ["worker", "reload", "--url", gateway.url, "--email", "root@example.test"]
    common += ["--password-file", str(secret)]
    not_a_model = tmp_path / "empty"
    not_a_model.mkdir()
    assert cli.main([*common, "--model", str(not_a_model)]) == 1
    assert "the swap failed: the worker could not load its model" in capsys.readouterr().err
    kept = worker(console)  # the old worker never stopped serving
    assert (kept["url"], kept["models"], kept["healthy"]) == (first["url"], ["tiny"], True)
    assert "config.json does not exist" in kept["reload_error"]

    # An assistant pinned on the old worker is pinned on the new one before it takes
    # requests: the pool holds the new worker until the warmer's sync releases it.
    key = gateway.department("quality")
    [department] = console.get("/api/admin/departments").json()["items"]
    prompt = "You check batches for the quality desk. " * 6
    body = {"department_id": department["id"], "name": "QA desk", "slug": "qa-desk"}
    created = console.post("/api/admin/assistants", json={**body, "system_prompt": prompt})
    assert created.status_code == 201, created.text

    def warm() -> dict[str, Any]:
        [desk] = console.get("/api/admin/assistants").json()["items"]
        return dict(desk["warm"] or {})

    assert until(warm, lambda w: w.get("state") == "warm")["worker"] == first["url"]
    started = time.monotonic()
    assert cli.main([*common, "--model", str(checkpoints[1]), "--name", "tiny"]) == 0
    assert "serves tiny at http://127.0.0.1:" in capsys.readouterr().out
    assert time.monotonic() - started < 100  # released by the sync, not the 120 s hold
    swapped = worker(console)
    assert swapped["url"] != first["url"] and swapped["reload_error"] == ""
    pinned = warm()
    assert (pinned["state"], pinned["worker"]) == ("warm", swapped["url"])
    client = gateway.client(key)
    messages: Any = [{"role": "user", "content": "Batch 7?"}]
    reply = client.chat.completions.create(model="qa-desk", messages=messages, max_tokens=2)
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    assert (reply.usage.prompt_tokens_details.cached_tokens or 0) >= pinned["pinned_tokens"]
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-password")
    for path, error in ((wrong, "sign-in refused (401)"), (tmp_path / "none", "could not be read")):
        options = [*common[:-1], str(path), "--model", str(checkpoints[0])]
        assert cli.main(options) == 1
        assert error in capsys.readouterr().err
    assert worker(console)["url"] == swapped["url"]  # nothing was asked
