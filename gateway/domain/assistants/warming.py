"""Keeping each active assistant's system message pinned in the prefix cache of the worker
its requests go to (docs/assistants.md, "Warm prefixes").

`PrefixWarmer` (``GatewayState.warmer``) reconciles what is pinned with what is wanted:
`sync` reads the active assistants' current versions, picks each one's worker exactly as the
proxy's router does (``pool.pick(model, chat_affinity_key([system message]))``), pins the
message there (the worker's pin is idempotent per content) and unpins what this gateway
pinned before that is no longer wanted: an old version, an archived assistant, a worker the
router no longer picks. Pins survive their gateway (a restarted gateway does not know its
predecessor's; the worker's restart clears them).

`request_sync` schedules one (coalesced: a burst of triggers is one sync). It is called at
start, whenever a worker becomes healthy (start, crash, restart: it may have lost its
cache), by the admin API after an assistant is made, edited or archived, and every
``interval_s`` seconds. A failure is an assistant's 'failed' status with the reason,
logged, never an exception out of the loop; a sync that cannot read the database is
retried after ``retry_s`` seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass

import httpx
import structlog
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from gateway.db.models.assistant import Assistant, AssistantVersion
from gateway.domain.assistants.cache import current_versions
from gateway.domain.assistants.pins import PinFailed, pin, unpin
from gateway.domain.assistants.prompt import system_message
from gateway.domain.assistants.schemas import WarmStatus
from gateway.domain.proxy.body import chat_affinity_key
from gateway.domain.workers.pool import NoUpstream, Upstream, WorkerPool

log = structlog.get_logger("gateway.assistants")

INTERVAL_S = 300.0  # a periodic sync, for what no trigger reports
RETRY_S = 15.0  # after a sync that failed as a whole (the database was unreachable)
PIN_TIMEOUT_S = 120.0  # a pin prefills the system prompt: a long one takes a while


@dataclass(frozen=True, slots=True)
class _Target:
    assistant_id: uuid.UUID
    slug: str
    version_id: uuid.UUID
    version: int
    message: dict[str, str]
    model: str | None
    prompt_tokens: int | None


# (worker url, prefix id): the pins this gateway made, and which assistant version each is.
PinKey = tuple[str, str]


class PrefixWarmer:
    def __init__(
        self,
        db: async_sessionmaker[AsyncSession],
        *,
        interval_s: float = INTERVAL_S,
        retry_s: float = RETRY_S,
    ) -> None:
        self._db = db
        self.interval_s = interval_s
        self.retry_s = retry_s
        self._pool: WorkerPool | None = None
        self._token = ""
        self._client: httpx.AsyncClient | None = None
        self._owns_client = False
        self._statuses: dict[uuid.UUID, WarmStatus] = {}
        self._pins: dict[PinKey, tuple[uuid.UUID, int]] = {}
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.syncs = 0  # completed syncs (tests wait on it)

    def attach(self, pool: WorkerPool, token: str, client: httpx.AsyncClient | None = None) -> None:
        """The pool to warm and its workers' token (the pool is built after the state)."""
        self._pool = pool
        self._token = token
        self._client = client or httpx.AsyncClient(timeout=PIN_TIMEOUT_S)
        self._owns_client = client is None
        pool.on_healthy(self._worker_healthy)
        # A worker that comes up takes requests once its assistants are pinned, so that
        # the first request after a start or restart already finds them cached.
        pool.hold_new_workers(PIN_TIMEOUT_S)

    def request_sync(self) -> None:
        """Schedule a sync; returns at once. Triggers before the previous sync began are
        one sync; one during a sync makes another after it."""
        self._wake.set()

    def status(self, assistant_id: uuid.UUID) -> WarmStatus | None:
        return self._statuses.get(assistant_id)

    async def start(self) -> None:
        if self._pool is None or self._task is not None:
            return
        # Made in the loop that runs them (an app may be started again in another loop).
        self._wake, self._lock = asyncio.Event(), asyncio.Lock()
        # The first sync runs before the gateway serves: the workers the pool's first check
        # found are held until it ends, and a request must not meet them held.
        try:
            await self.sync()
        except Exception as exc:
            log.error("assistant_sync_failed", error=f"{type(exc).__name__}: {exc}")
            self.request_sync()
        self._task = asyncio.create_task(self._run(), name="prefix-warmer")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._owns_client and self._client is not None:
            await self._client.aclose()

    async def sync(self) -> None:
        """One reconcile (see the module's doc); raises only when the database cannot be
        read (the loop retries)."""
        if self._pool is None or self._client is None:
            return
        async with self._lock:
            # The workers held when this sync began are released when it ends, warm or
            # not (one that became healthy since is released by the sync it triggered).
            held = [u for u in self._pool.upstreams if u.warming]
            try:
                await self._reconcile(self._pool, self._client)
            finally:
                for upstream in held:
                    self._pool.release(upstream)
            self.syncs += 1

    async def _reconcile(self, pool: WorkerPool, client: httpx.AsyncClient) -> None:
        async with self._db() as db:
            rows = (await db.execute(current_versions())).all()
        targets = [_target(assistant, version) for assistant, version in rows]
        wanted: set[PinKey] = set()
        failed: set[tuple[uuid.UUID, int]] = set()
        counted: dict[uuid.UUID, int] = {}
        for target in targets:
            status = self._statuses.get(target.assistant_id)
            if status is None or status.version != target.version:
                self._statuses[target.assistant_id] = WarmStatus(
                    state="pending", version=target.version
                )
        for target in targets:
            status, key = await self._warm(pool, client, target)
            self._statuses[target.assistant_id] = status
            if key is None:
                failed.add((target.assistant_id, target.version))
            else:
                wanted.add(key)
                self._pins[key] = (target.assistant_id, target.version)
                if target.prompt_tokens is None and status.num_tokens is not None:
                    counted[target.version_id] = status.num_tokens
        active = {t.assistant_id for t in targets}
        for gone in set(self._statuses) - active:
            del self._statuses[gone]
        # A version that failed to warm now keeps the pins it had (a worker's hiccup
        # must not cost a pin that still serves it).
        wanted |= {key for key, pinned in self._pins.items() if pinned in failed}
        await self._unpin_unwanted(client, wanted)
        await self._store_counts(counted)

    async def _warm(
        self, pool: WorkerPool, client: httpx.AsyncClient, target: _Target
    ) -> tuple[WarmStatus, PinKey | None]:
        try:
            served = pool.models(warming_too=True)
            model = target.model or (served[0] if served else None)
            if model is None:
                raise PinFailed("no healthy worker serves a model right now")
            try:
                key = chat_affinity_key([target.message])
                upstream = pool.pick(model, key, warming_too=True)
            except NoUpstream as exc:
                raise PinFailed(str(exc)) from None
            started = time.perf_counter()
            pinned = await pin(client, upstream.url, self._token, target.message, model)
        except PinFailed as exc:
            log.warning("assistant_warm_failed", assistant=target.slug, error=str(exc))
            return WarmStatus(state="failed", version=target.version, error=str(exc)), None
        seconds = round(time.perf_counter() - started, 3)
        log.info(
            "assistant_warm",
            assistant=target.slug,
            worker=upstream.url,
            id=pinned.id,
            seconds=seconds,
        )
        status = WarmStatus(
            state="warm",
            version=target.version,
            worker=upstream.url,
            pinned_tokens=pinned.pinned_tokens,
            num_tokens=pinned.num_tokens,
        )
        return status, (upstream.url, pinned.id)

    async def _unpin_unwanted(self, client: httpx.AsyncClient, wanted: set[PinKey]) -> None:
        for key in [k for k in self._pins if k not in wanted]:
            worker, prefix_id = key
            try:
                await unpin(client, worker, self._token, prefix_id)
            except PinFailed as exc:  # kept, and tried again at the next sync
                log.warning("assistant_unpin_failed", worker=worker, id=prefix_id, error=str(exc))
                continue
            log.info("assistant_unpinned", worker=worker, id=prefix_id)
            del self._pins[key]

    async def _store_counts(self, counted: dict[uuid.UUID, int]) -> None:
        """The versions' prompt_tokens, where the worker counted them and none was stored."""
        if not counted:
            return
        async with self._db.begin() as db:
            for version_id, tokens in counted.items():
                await db.execute(
                    update(AssistantVersion)
                    .where(AssistantVersion.id == version_id)
                    .where(AssistantVersion.prompt_tokens.is_(None))
                    .values(prompt_tokens=tokens)
                )

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            try:
                await self.sync()
            except Exception as exc:
                log.error("assistant_sync_failed", error=f"{type(exc).__name__}: {exc}")
                asyncio.get_running_loop().call_later(self.retry_s, self._wake.set)

    def _worker_healthy(self, upstream: Upstream) -> None:
        self.request_sync()


def _target(assistant: Assistant, version: AssistantVersion) -> _Target:
    return _Target(
        assistant.id,
        assistant.slug,
        version.id,
        version.version,
        system_message(version.system_prompt, version.response_template),
        version.model,
        version.prompt_tokens,
    )
