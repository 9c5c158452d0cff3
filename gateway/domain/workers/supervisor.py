"""The embedded default's worker: one ``python -m inference serve`` child, kept alive.

The gateway starts it, waits until its /ready answers, and restarts it (with backoff) if it
dies; ``close()`` drains it with SIGTERM. The internal token travels in an environment
variable named by ``--api-key-env``, never on the command line, where ``ps`` would show it;
the rest of the child's environment is an allow-list (worker_env.py), not the gateway's.
The child's output goes to a log file; a start that fails quotes that log's last lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import structlog

from gateway.domain.workers import orphan_guard
from gateway.domain.workers.worker_env import worker_environment
from gateway.private_files import private_dir, private_opener

log = structlog.get_logger("gateway.workers")

TOKEN_ENV = "ENCLAVE_WORKER_TOKEN"
# The worker's start-up caches (inference/cache_dir.py): prepared weights, built kernels.
CACHE_ENV = "INFERENCE_CACHE_DIR"
HOST = "127.0.0.1"


class WorkerStartError(RuntimeError):
    """The worker exited or stayed unready during start-up; the message quotes its log."""


@dataclass(frozen=True, slots=True)
class Restart:
    """One restart of the worker, as listeners see it: ``reason`` is ``crash`` (it exited
    unasked), ``start_failed`` (the previous restart did not come up) or ``admin``."""

    url: str
    reason: str
    exit: str  # how the previous process ended, in words
    backoff_s: float  # how long the supervisor waited before this start


class WorkerSupervisor:
    # A worker that dies again and again is restarted after 1, 2, 4... up to 30 s; one that
    # ran for a minute before dying starts over at 1 s.
    min_backoff_s = 1.0
    max_backoff_s = 30.0
    stable_after_s = 60.0
    poll_s = 0.2

    def __init__(
        self,
        model_path: Path,
        port: int,
        token: str,
        *,
        served_name: str | None = None,
        log_dir: Path,
        python: str = sys.executable,
        extra_args: Sequence[str] = (),
        extra_env_names: Sequence[str] = (),
        cache_dir: Path | None = None,
    ) -> None:
        """``cache_dir``: the worker's start-up caches (its INFERENCE_CACHE_DIR, unless the
        gateway's own environment sets that variable)."""
        if not token:
            raise ValueError("the embedded worker needs a token (see embedded_worker_token)")
        self.model_path = Path(model_path)
        self.port = port
        self.url = f"http://{HOST}:{port}"
        self.served_name = served_name or self.model_path.stem
        self.log_path = Path(log_dir) / f"worker-{port}.log"
        self.python = python
        self.extra_args = tuple(extra_args)
        self.extra_env_names = tuple(extra_env_names)  # beyond worker_env's allow-list
        self.cache_dir = cache_dir
        self.restarts = 0  # for /metrics and admins: how often the child had to come back
        self._token = token
        self._process: asyncio.subprocess.Process | None = None
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False
        self._ready_timeout = 180.0
        self._log_offset = 0  # where the current run's output starts in the log
        # An admin's restart: the next exit is expected (no backoff, not counted in
        # ``restarts``), and the event is set once the next launch is over.
        self._restart_requested = False
        self._relaunched: asyncio.Event | None = None
        # Called (without awaiting) as each restart begins: metrics and the audit log.
        self.restart_listeners: list[Callable[[Restart], None]] = []

    def sibling(self, model_path: Path, port: int, served_name: str | None) -> WorkerSupervisor:
        """A supervisor for another model beside this one (a weight swap): the same
        interpreter, token, options, log directory and restart listeners."""
        other = WorkerSupervisor(
            model_path, port, self._token, served_name=served_name,
            log_dir=self.log_path.parent, python=self.python, extra_args=self.extra_args,
            extra_env_names=self.extra_env_names, cache_dir=self.cache_dir,
        )  # fmt: skip
        for name in ("min_backoff_s", "max_backoff_s", "stable_after_s"):
            setattr(other, name, getattr(self, name))
        other.restart_listeners = list(self.restart_listeners)
        return other

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    def command(self) -> list[str]:
        return [
            self.python, "-m", "inference", "serve",
            "--model", str(self.model_path),
            "--host", HOST,
            "--port", str(self.port),
            "--served-model-name", self.served_name,
            "--api-key-env", TOKEN_ENV,
            *self.extra_args,
        ]  # fmt: skip

    async def start(self, ready_timeout: float = 180) -> str:
        """Start the worker, wait until it is ready, and keep it running; its base URL."""
        if self._watcher is not None or self._closing:
            raise RuntimeError("the worker supervisor was already started")
        if not self.model_path.exists():
            raise WorkerStartError(f"the model {self.model_path} does not exist")
        self._ready_timeout = ready_timeout
        await self._launch()
        self._watcher = asyncio.create_task(self._keep_running(), name="worker-supervisor")
        return self.url

    async def close(self, drain_timeout: float = 30) -> None:
        """Stop restarting; SIGTERM the worker (it drains), SIGKILL it after the timeout."""
        self._closing = True
        if self._relaunched is not None:
            self._relaunched.set()  # a restart() waiting for a launch that will not come
        if self._watcher is not None:
            self._watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watcher
        process = self._process
        if process is None or process.returncode is not None:
            return
        await _stop(process, drain_timeout)
        log.info("worker stopped", status=process.returncode)

    @property
    def running(self) -> bool:
        """Started and not closed: restart() may be asked."""
        return self._watcher is not None and not self._watcher.done() and not self._closing

    @property
    def starting(self) -> bool:
        """The first start is under way (the pool's health check may already see the worker
        answer: start() returns once its own readiness check has)."""
        return self._process is not None and self._watcher is None and not self._closing

    async def restart(self, drain_timeout: float = 30) -> None:
        """An admin's restart: SIGTERM the worker (it drains what it runs), SIGKILL it after
        ``drain_timeout``, and start a new one at once. Returns once that start is over,
        ready or failed; a failed one is retried with backoff, as after a crash."""
        if not self.running:
            raise RuntimeError("the worker supervisor is not running")
        relaunched = self._relaunched = asyncio.Event()
        process = self._process
        if process is not None and process.returncode is None:
            self._restart_requested = True
            log.info("worker restart asked; draining it", pid=process.pid)
            await _stop(process, drain_timeout)
        # else it died already and the watcher is about to start it again.
        await relaunched.wait()

    async def _launch(self) -> None:
        private_dir(self.log_path.parent)
        self._log_offset = offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # The orphan guard makes the child die with this process, even on SIGKILL.
        # Run as a file (it needs only the standard library), so ``python`` may be another
        # environment's interpreter, one that has inference but not the gateway.
        guard = [self.python, orphan_guard.__file__, str(os.getpid())]
        # The child keeps its own copy of the fd. 0600: the log may quote prompts.
        with open(self.log_path, "ab", opener=private_opener) as output:
            try:
                process = await self._spawn(guard, output)
            except OSError as exc:
                raise WorkerStartError(f"the worker could not be started: {exc}") from exc
        self._process = process
        log.info("worker starting", pid=process.pid, url=self.url, log=str(self.log_path))
        try:
            await self._wait_ready(process, offset)
        except BaseException:
            if process.returncode is None:
                process.kill()
                await process.wait()
            raise
        log.info("worker ready", pid=process.pid, url=self.url)

    async def _spawn(self, guard: list[str], output: IO[bytes]) -> asyncio.subprocess.Process:
        # Never the gateway's whole environment: it holds the gateway's secrets.
        env = worker_environment(os.environ, TOKEN_ENV, self._token, self.extra_env_names)
        if self.cache_dir is not None:
            env.setdefault(CACHE_ENV, str(self.cache_dir))
        return await asyncio.create_subprocess_exec(
            *guard,
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=output,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            # Its own session: a Ctrl-C on the gateway's terminal reaches the gateway,
            # which then drains the worker, instead of killing the worker mid-stream.
            start_new_session=True,
        )

    async def _wait_ready(self, process: asyncio.subprocess.Process, offset: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._ready_timeout
        exited = asyncio.ensure_future(process.wait())
        try:
            async with httpx.AsyncClient(timeout=2.0) as client:
                while True:
                    if exited.done():
                        raise WorkerStartError(
                            f"the worker exited ({describe_status(exited.result())}) before"
                            f" it was ready; the end of {self.log_path}:\n{self._tail(offset)}"
                        )
                    with contextlib.suppress(httpx.TransportError, ValueError):
                        answer = await client.get(f"{self.url}/ready")
                        if answer.status_code == 200:
                            return
                        if answer.json().get("status") == "failed":  # it will not load
                            raise WorkerStartError(
                                f"the worker could not load its model; the end of"
                                f" {self.log_path}:\n{self._tail(offset)}"
                            )
                    if loop.time() > deadline:
                        raise WorkerStartError(
                            f"the worker was not ready within {self._ready_timeout:g} s;"
                            f" the end of {self.log_path}:\n{self._tail(offset)}"
                        )
                    await asyncio.wait({exited}, timeout=self.poll_s)
        finally:
            exited.cancel()

    async def _keep_running(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = self.min_backoff_s
        failed_start = False
        while True:
            process = self._process
            if process is None:  # only before start(); start() sets it before watching
                return
            started = loop.time()
            status = await process.wait()
            if self._closing:
                return
            asked, self._restart_requested = self._restart_requested, False
            waited = 0.0
            if asked:
                log.info("worker stopped for a restart", status=describe_status(status))
                backoff = self.min_backoff_s
            else:
                if loop.time() - started >= self.stable_after_s:
                    backoff = self.min_backoff_s
                log.error(
                    "worker exited; restarting",
                    status=describe_status(status),
                    restart_in_s=backoff,
                    log_tail=self._tail(self._log_offset),
                )
                await asyncio.sleep(backoff)
                waited, backoff = backoff, min(backoff * 2, self.max_backoff_s)
            reason = "admin" if asked else "start_failed" if failed_start else "crash"
            self._announce(Restart(self.url, reason, describe_status(status), waited))
            failed_start = False
            try:
                await self._launch()
            except WorkerStartError as exc:
                log.error("worker restart failed", error=str(exc))
                failed_start = True
                continue  # its process is dead, so the next round backs off and retries
            except Exception:  # a bug here must not end supervision for good
                log.exception("worker restart crashed")
                continue
            finally:
                if self._relaunched is not None:
                    self._relaunched.set()
                    self._relaunched = None
            if not asked:
                self.restarts += 1

    def _announce(self, restart: Restart) -> None:
        for listener in self.restart_listeners:
            try:
                listener(restart)
            except Exception:  # a listener's bug must not end supervision
                log.exception("worker restart listener failed", reason=restart.reason)

    def _tail(self, offset: int, lines: int = 20) -> str:
        """The last lines the child wrote since ``offset`` (this run's output only)."""
        try:
            with self.log_path.open("rb") as handle:
                size = handle.seek(0, os.SEEK_END)
                handle.seek(max(offset, size - 8192))
                text = handle.read().decode(errors="replace")
        except OSError as exc:
            return f"(its log could not be read: {exc})"
        return "\n".join(text.splitlines()[-lines:]) or "(it wrote nothing)"


def describe_status(status: int) -> str:
    if status < 0:
        try:
            return f"killed by {signal.Signals(-status).name}"
        except ValueError:
            return f"killed by signal {-status}"
    return f"status {status}"


async def _stop(process: asyncio.subprocess.Process, drain_timeout: float) -> None:
    """SIGTERM (the worker drains what it runs), then SIGKILL after ``drain_timeout``."""
    process.terminate()
    try:
        await asyncio.wait_for(process.wait(), drain_timeout)
    except TimeoutError:
        log.warning("worker did not drain in time; killing it", timeout_s=drain_timeout)
        process.kill()
        await process.wait()
