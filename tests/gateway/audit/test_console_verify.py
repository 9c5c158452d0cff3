"""The console's chain check (console_verify.py): a consistent walk that never holds up the
writer, one walk at a time however many admins ask."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.domain.audit import console_verify
from gateway.domain.audit import verify as verify_module
from gateway.domain.audit.console_verify import ChainVerification
from gateway.domain.audit.store import append
from gateway.domain.audit.verify import VerifyResult
from tests.gateway.audit.support import entry, seal_for, sessions


async def test_a_write_during_the_walk_neither_waits_nor_breaks_it(
    any_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seal = seal_for(tmp_path)
    async with sessions(any_url) as db:
        await append(db, [entry(n) for n in range(1, 6)], seal, skip_recorded=False)
        # Pages of two, and a batch of five more appended when the walk reads its first
        # page: the writer must not wait for the walk (5 s would fail the test).
        monkeypatch.setattr(verify_module, "PAGE_SIZE", 2)
        scalars, wrote = AsyncSession.scalars, []

        async def scalars_then_write(self: AsyncSession, *args: Any, **kwargs: Any) -> Any:
            if not wrote:
                wrote.append(True)
                more = [entry(n, "later") for n in range(6, 11)]
                await asyncio.wait_for(append(db, more, seal, skip_recorded=False), 5)
            return await scalars(self, *args, **kwargs)

        monkeypatch.setattr(AsyncSession, "scalars", scalars_then_write)
        first = await ChainVerification(db, seal).run()
        monkeypatch.setattr(AsyncSession, "scalars", scalars)
        assert wrote and first.ok, first
        # The walk checked the chain as it found it at its start, not a mix.
        assert (first.checked, first.head_seq) == (5, 5)
        assert first.head_log_matches is True and first.recorded_head is not None
        assert first.recorded_head.seq == 5
        second = await ChainVerification(db, seal).run()
        assert (second.ok, second.checked, second.head_seq) == (True, 10, 10)


async def test_admins_asking_at_once_share_one_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    release = asyncio.Event()

    async def slow_walk(session: Any, seal: Any) -> VerifyResult:
        calls.append(1)
        await release.wait()
        return VerifyResult(True, 3, None, "", head_seq=3, head_hash="h")

    class Session:
        async def __aenter__(self) -> Session:
            return self

        async def __aexit__(self, *exc: object) -> None:
            pass

        def get_bind(self) -> Any:
            return type("Bind", (), {"dialect": type("D", (), {"name": "sqlite"})})()

        async def rollback(self) -> None:
            pass

    monkeypatch.setattr(console_verify, "verify_chain", slow_walk)
    verification = ChainVerification(Session, None)  # type: ignore[arg-type]
    first = asyncio.create_task(verification.run())
    second = asyncio.create_task(verification.run())
    await asyncio.sleep(0.05)
    first.cancel()  # a caller that goes away does not end the walk for the others
    release.set()
    result = await second
    assert calls == [1] and result.ok and result.checked == 3
    with pytest.raises(asyncio.CancelledError):
        await first
    await verification.run()  # a later request starts a new walk
    assert calls == [1, 1]
