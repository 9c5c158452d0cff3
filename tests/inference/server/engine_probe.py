"""A worker whose real engine is watched from inside, and whose steps can be held.

The fair-share tests need every request in the scheduler's waiting queue before any is
admitted, and the order in which they were then served. Both are read on the engine
thread, so they do not depend on how quickly HTTP replies reach the test.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from inference.server.app import WorkerApp, create_app
from inference.server.settings import ServerSettings
from tests.inference.server.conftest import API_KEY, MODEL, serving, tiny_engine

if TYPE_CHECKING:
    from inference.engine.llm_engine import LLMEngine
    from inference.outputs import RequestOutput

BLOCKER = "blocker"


class EngineProbe:
    def __init__(self, engine: LLMEngine) -> None:
        self.running = threading.Event()  # cleared: the next step waits until it is set
        self.running.set()
        self.held = threading.Event()  # set once a step is waiting on ``running``
        self.added: dict[str, tuple[str, float]] = {}  # request id -> (tenant, weight)
        self.finished: list[str] = []  # tenants, in the order their requests finished
        real_add, real_step = engine.add_request, engine.step

        def add_request(
            request_id: str,
            prompt: str | Sequence[int],
            params: Any,
            *,
            tenant: str = "default",
            weight: float = 1.0,
        ) -> None:
            self.added[request_id] = (tenant, weight)
            real_add(request_id, prompt, params, tenant=tenant, weight=weight)

        def step() -> list[RequestOutput]:
            if not self.running.is_set():
                self.held.set()
                self.running.wait()
            outputs = real_step()
            self.finished += [self.added[o.request_id][0] for o in outputs if o.finished]
            return outputs

        # Instance attributes shadow the methods; AsyncEngine calls them on the instance.
        setattr(engine, "add_request", add_request)  # noqa: B010
        setattr(engine, "step", step)  # noqa: B010


@dataclass
class ProbedWorker:
    url: str
    app: WorkerApp
    probe: EngineProbe

    def served_in_turn(self, requests: Sequence[Callable[[], Any]]) -> list[str]:
        """Queue every request behind a held engine, then let it go; the tenants in the
        order they were served.

        A first request (tenant ``blocker``) is admitted while the engine is held, so it
        occupies the one sequence slot while the others are added: the scheduler then
        has all of them waiting before it admits any.
        """
        probe = self.probe
        async_engine = self.app.worker.async_engine
        assert async_engine is not None
        already = len(probe.finished)
        probe.held.clear()
        probe.running.clear()
        blocker = {"model": MODEL, "prompt": "Hold", "max_tokens": 2, "ignore_eos": True}
        headers = {"Authorization": f"Bearer {API_KEY}", "X-Enclave-Tenant": BLOCKER}
        threads = [
            threading.Thread(
                target=httpx.post,
                args=(f"{self.url}/v1/completions",),
                kwargs={"json": blocker, "headers": headers, "timeout": 120},
            )
        ]
        threads[0].start()
        try:
            assert probe.held.wait(30), "the blocker never reached the engine"
            threads += [threading.Thread(target=request) for request in requests]
            for thread in threads[1:]:
                thread.start()
            deadline = time.monotonic() + 60
            while async_engine.num_pending_adds < len(requests):
                assert time.monotonic() < deadline, "the requests never reached the worker"
                time.sleep(0.01)
        finally:
            probe.running.set()
            for thread in threads:
                thread.join(120)
        served = probe.finished[already:]
        assert served[0] == BLOCKER and len(served) == len(requests) + 1, served
        return served[1:]


@contextlib.contextmanager
def probed_worker(checkpoint: Path) -> Iterator[ProbedWorker]:
    """A worker with one sequence slot (``max_num_seqs=1``), so admission order is
    service order."""
    engine = tiny_engine(checkpoint, max_num_seqs=1)
    probe = EngineProbe(engine)
    app = create_app(engine, ServerSettings(served_model_name=MODEL, api_key=API_KEY))
    with serving(app) as url:
        yield ProbedWorker(url, app, probe)
