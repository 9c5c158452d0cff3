"""AsyncEngine: an LLMEngine that steps in its own thread, driven from asyncio.

HTTP handlers never wait on a model step: they put commands (add, abort, call) on a
thread-safe queue that the engine thread drains between steps, and read each request's
outputs from an asyncio queue that the engine thread fills through
``call_soon_threadsafe``. Only the engine thread touches the engine's mutable state: what
else must touch it runs there through :meth:`AsyncEngine.call`, or as a request's
``after_finish`` (right after the step that finished it, before the next step allocates).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from inference.outputs import RequestOutput
from inference.sampling.params import SamplingParams

log = logging.getLogger("inference.async_engine")
T = TypeVar("T")
AfterFinish = Callable[[RequestOutput], object]


class EngineCore(Protocol):
    """The part of LLMEngine this wrapper drives."""

    def add_request(
        self,
        request_id: str,
        prompt: str | Sequence[int],
        params: SamplingParams,
        *,
        tenant: str = "default",
        weight: float = 1.0,
    ) -> None: ...

    def abort_request(self, request_id: str) -> None: ...

    def step(self) -> list[RequestOutput]: ...

    def has_unfinished_requests(self) -> bool: ...


class RequestAborted(Exception):
    """The request was cut off by the server (drain timeout or shutdown)."""


@dataclass
class RequestTiming:
    """What one request took, on the monotonic clock; handed to ``on_finish``."""

    request_id: str
    tenant: str
    arrival: float
    queue_time: float | None = None  # until the step that produced the first token began
    time_to_first_token: float | None = None
    inter_token_latencies: list[float] = field(default_factory=list)
    end_to_end: float = 0.0
    num_prompt_tokens: int = 0
    num_generated_tokens: int = 0
    num_cached_tokens: int = 0
    finish_reason: str = "abort"
    _last_token_time: float = 0.0
    _num_tokens_seen: int = 0

    def record(self, output: RequestOutput, step_start: float, step_end: float) -> None:
        num_tokens = len(output.outputs[0].token_ids) if output.outputs else 0
        if num_tokens > self._num_tokens_seen:
            if self.time_to_first_token is None:
                self.queue_time = max(0.0, step_start - self.arrival)
                self.time_to_first_token = step_end - self.arrival
            else:
                self.inter_token_latencies.append(step_end - self._last_token_time)
            self._last_token_time = step_end
            self._num_tokens_seen = num_tokens
        self.num_prompt_tokens = len(output.prompt_token_ids)
        self.num_generated_tokens = sum(len(c.token_ids) for c in output.outputs)
        self.num_cached_tokens = output.num_cached_tokens


@dataclass
class _Add:
    request_id: str
    prompt: str | list[int]
    params: SamplingParams
    tenant: str
    weight: float
    done: concurrent.futures.Future[None]
    after_finish: tuple[AfterFinish, concurrent.futures.Future[object]] | None = None


@dataclass
class _Abort:
    request_id: str


@dataclass
class _Call:
    fn: Callable[[], Any]
    done: concurrent.futures.Future[Any]


class _Stop:
    pass


class RequestHandle:
    """One request in the engine, as its HTTP handler sees it."""

    def __init__(self, owner: AsyncEngine, timing: RequestTiming) -> None:
        self._owner = owner
        self.timing = timing
        self.request_id = timing.request_id
        self.queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self.finished = False
        # What the request's after_finish returned (or raised); see AsyncEngine.add_request.
        self.after_finish: concurrent.futures.Future[object] = concurrent.futures.Future()

    async def outputs(self) -> AsyncGenerator[RequestOutput, None]:
        """Yield cumulative outputs, the last one finished; RequestAborted if cut off.

        Leaving early (the client went away) aborts the request, freeing its KV blocks.
        """
        try:
            while True:
                item = await self.queue.get()
                # Outputs are cumulative: a consumer that fell behind skips to the newest.
                while isinstance(item, RequestOutput) and not item.finished:
                    if self.queue.empty():
                        break
                    item = self.queue.get_nowait()
                if isinstance(item, BaseException):
                    raise item
                if item.finished:
                    self.finished = True
                    self.timing.finish_reason = item.outputs[0].finish_reason or "stop"
                yield item
                if self.finished:
                    return
        finally:
            self.abort()

    def abort(self) -> None:
        """Idempotent; after the last output it only reports the request's timing."""
        self._owner._release(self, abort=not self.finished)


class AsyncEngine:
    def __init__(
        self,
        engine: EngineCore,
        *,
        on_finish: Callable[[RequestTiming], None] | None = None,
    ) -> None:
        self.engine = engine
        self._on_finish = on_finish
        self._commands: queue.SimpleQueue[_Add | _Abort | _Call | _Stop] = queue.SimpleQueue()
        self._streams: dict[str, RequestHandle] = {}
        self._num_pending_adds = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._live: set[str] = set()  # engine-thread side: ids added and not yet finished
        self._after_finish: dict[str, tuple[AfterFinish, concurrent.futures.Future[object]]] = {}

    # -- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start the engine thread; call from the event loop that will consume outputs."""
        if self._thread is not None:
            raise RuntimeError("AsyncEngine.start() was already called")
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Cut every request off and stop the engine thread."""
        self.abort_all()
        if self._thread is not None:
            self._commands.put(_Stop())
            self._thread.join(timeout)

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    @property
    def num_pending_adds(self) -> int:
        """Requests submitted but not yet seen by the engine thread (not in its queue)."""
        return self._num_pending_adds

    async def wait_idle(self, timeout: float, poll_s: float = 0.05) -> bool:
        """Wait until no request is in flight; False if ``timeout`` passed first."""
        deadline = time.monotonic() + timeout
        while self._streams:
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    def abort_all(self) -> None:
        for handle in self._streams.values():
            handle.queue.put_nowait(RequestAborted("the server cut the request off"))

    # -- requests -----------------------------------------------------------------------

    async def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams,
        *,
        tenant: str = "default",
        weight: float = 1.0,
        after_finish: AfterFinish | None = None,
    ) -> RequestHandle:
        """Hand a request to the engine; return once the engine has accepted it.

        Raises the engine's ValueError (a prompt too long, say). The wait is for the engine
        thread to reach its command queue, at most one step. The caller must iterate
        ``handle.outputs()`` to the end or call ``handle.abort()``.

        ``after_finish(output)`` runs on the engine thread with the finished output, after
        the step that finished the request and before the next one (so nothing has been
        allocated, or evicted, since); ``handle.after_finish`` then holds what it returned
        or raised (RequestAborted, or the step's error, if the request never finished).
        """
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the engine thread is not running")
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        handle = RequestHandle(self, RequestTiming(request_id, tenant, time.monotonic()))
        self._streams[request_id] = handle
        added: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._num_pending_adds += 1
        try:
            hook = None if after_finish is None else (after_finish, handle.after_finish)
            self._commands.put(_Add(request_id, prompt, params, tenant, weight, added, hook))
            await asyncio.wrap_future(added)
        except BaseException:
            # Cancelled or refused: forget it. An abort queued after the add is applied
            # after it, so a cancelled add that the engine did take is freed again.
            del self._streams[request_id]
            self._commands.put(_Abort(request_id))
            raise
        finally:
            self._num_pending_adds -= 1
        return handle

    async def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn()`` on the engine thread between steps; return (or raise) what it does."""
        if self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the engine thread is not running")
        done: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._commands.put(_Call(fn, done))
        return await asyncio.wrap_future(done)

    def _release(self, handle: RequestHandle, *, abort: bool) -> None:
        if self._streams.pop(handle.request_id, None) is None:
            return
        if abort:
            self._commands.put(_Abort(handle.request_id))
        timing = handle.timing
        timing.end_to_end = time.monotonic() - timing.arrival
        if self._on_finish is not None:
            try:
                self._on_finish(timing)
            except Exception:  # metrics must never break a response
                log.exception("on_finish callback failed")

    # -- the engine thread --------------------------------------------------------------

    def _run(self) -> None:
        while True:
            if not self.engine.has_unfinished_requests() and not self._apply(self._commands.get()):
                return
            while True:
                try:
                    command = self._commands.get_nowait()
                except queue.Empty:
                    break
                if not self._apply(command):
                    return
            if not self.engine.has_unfinished_requests():
                continue
            started = time.monotonic()
            try:
                outputs = self.engine.step()
            except Exception as exc:
                log.exception("engine step failed; failing the requests in flight")
                self._fail_all(exc)
                continue
            for output in outputs:
                if output.finished:
                    self._live.discard(output.request_id)
                    self._run_after_finish(output)
            self._call_in_loop(self._deliver, outputs, started, time.monotonic())

    def _run_after_finish(self, output: RequestOutput) -> None:
        hook = self._after_finish.pop(output.request_id, None)
        if hook is None:
            return
        fn, done = hook
        _settle(done, lambda: fn(output))

    def _drop_after_finish(self, request_id: str, exc: BaseException) -> None:
        hook = self._after_finish.pop(request_id, None)
        if hook is not None and hook[1].set_running_or_notify_cancel():
            hook[1].set_exception(exc)

    def _apply(self, command: _Add | _Abort | _Call | _Stop) -> bool:
        if isinstance(command, _Stop):
            return False
        if isinstance(command, _Abort):
            self._live.discard(command.request_id)
            self._drop_after_finish(command.request_id, RequestAborted("the request was aborted"))
            self.engine.abort_request(command.request_id)
            return True
        if isinstance(command, _Call):
            _settle(command.done, command.fn)
            return True
        if not command.done.set_running_or_notify_cancel():
            return True  # its handler was cancelled before the engine saw it
        try:
            self.engine.add_request(
                command.request_id,
                command.prompt,
                command.params,
                tenant=command.tenant,
                weight=command.weight,
            )
        except Exception as exc:
            command.done.set_exception(exc)
        else:
            self._live.add(command.request_id)
            if command.after_finish is not None:
                self._after_finish[command.request_id] = command.after_finish
            command.done.set_result(None)
        return True

    def _fail_all(self, exc: Exception) -> None:
        for request_id in list(self._live):
            try:
                self.engine.abort_request(request_id)
            except Exception:
                log.exception("abort after a failed step failed for %s", request_id)
        failed = list(self._live)
        self._live.clear()
        for request_id in failed:
            self._drop_after_finish(request_id, exc)
        self._call_in_loop(self._deliver_error, failed, exc)

    def _call_in_loop(self, callback: Callable[..., None], *args: object) -> None:
        if self._loop is None:
            return
        # A closed loop raises RuntimeError: nobody is left to read the outputs.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(callback, *args)

    def _deliver(self, outputs: list[RequestOutput], step_start: float, step_end: float) -> None:
        for output in outputs:
            handle = self._streams.get(output.request_id)
            if handle is None:  # its consumer has gone; the abort is already queued
                continue
            handle.timing.record(output, step_start, step_end)
            handle.queue.put_nowait(output)

    def _deliver_error(self, request_ids: list[str], exc: Exception) -> None:
        for request_id in request_ids:
            handle = self._streams.get(request_id)
            if handle is not None:
                handle.queue.put_nowait(exc)


def _settle(done: concurrent.futures.Future[Any], fn: Callable[[], Any]) -> None:
    """Run ``fn`` into ``done``, unless its waiter has already given up (cancelled it)."""
    if not done.set_running_or_notify_cancel():
        return
    try:
        done.set_result(fn())
    except Exception as exc:
        done.set_exception(exc)
