"""Pruning old records moves the chain's anchor; what is left still verifies."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path

import pytest

from gateway import cli
from gateway.db.base import utc_now
from gateway.domain.audit.retention import prune, retention_loop
from tests.gateway.audit.support import (
    T0,
    entry,
    request_ids_in_seq_order,
    running_writer,
    seal_for,
    sessions,
    sql,
    verify,
)


async def test_prune_moves_the_anchor_and_the_rest_still_verifies(
    any_url: str, tmp_path: Path
) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(100):
            # One an hour; record 60 is written late, so it is younger than 61..64.
            at = T0 + timedelta(hours=n if n != 60 else 65)
            writer.submit(entry(n, created_at=at))
    key = seal_for(tmp_path).key
    async with sessions(any_url) as db:
        async with db.begin() as session:
            deleted, head = await prune(session, T0 + timedelta(hours=64, minutes=30), key)
        async with db.begin() as session:
            again = await prune(session, T0 + timedelta(hours=64, minutes=30), key)
            assert again == (0, None)  # idempotent, and nothing logged
    # Only a prefix of the chain can go: up to the young record 60, not 61..64 behind it.
    assert deleted == 60
    assert head is not None and head[0] == 101  # the prune's own record, after the rest
    [(action, email, details)] = await sql(
        any_url, "SELECT action, user_email, details FROM request_records WHERE seq = 101"
    )
    assert (action, email) == ("audit.prune", "system")
    assert json.loads(details)["after"]["anchor_seq"] == 60
    assert json.loads(details)["deleted"] == 60
    [(anchor_seq, anchor_hash)] = await sql(
        any_url, "SELECT anchor_seq, anchor_hash FROM audit_chain"
    )
    assert anchor_seq == 60
    [(hash_60,)] = await sql(any_url, "SELECT prev_hash FROM request_records WHERE seq = 61")
    assert anchor_hash == hash_60
    assert (await request_ids_in_seq_order(any_url))[0] == "t-60"
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.checked) == (True, 41)
    # The chain goes on from there, and a removal just above the anchor is still caught.
    async with running_writer(any_url, tmp_path / "spool") as writer:
        writer.submit(entry(100))
    assert (await verify(any_url, tmp_path)).checked == 42
    await sql(any_url, "DELETE FROM request_records WHERE seq = 61")
    assert (await verify(any_url, tmp_path)).bad_seq == 61


async def test_records_deleted_from_the_start_with_the_anchor_moved_are_caught(
    any_url: str, tmp_path: Path
) -> None:
    """Retention's own move is signed by its audit.prune record; a hand-made one is not."""
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(30):
            writer.submit(entry(n))
    assert (await verify(any_url, tmp_path)).ok
    [(hash_10,)] = await sql(any_url, "SELECT hash FROM request_records WHERE seq = 10")
    await sql(any_url, "DELETE FROM request_records WHERE seq <= 10")
    await sql(any_url, f"UPDATE audit_chain SET anchor_seq = 10, anchor_hash = '{hash_10}'")
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 10)
    assert "no audit.prune record names that anchor" in result.reason


async def test_retention_loop_prunes_until_cancelled(sqlite_url: str, tmp_path: Path) -> None:
    now = utc_now()
    async with running_writer(sqlite_url, tmp_path / "spool") as writer:
        for n in range(10):
            writer.submit(entry(n, created_at=now - timedelta(days=10 - n)))  # 10..1 days old
    async with sessions(sqlite_url) as db:
        task = asyncio.create_task(retention_loop(db, 3, seal_for(tmp_path), interval=0.05))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert await request_ids_in_seq_order(sqlite_url) == ["t-8", "t-9"]
    result = await verify(sqlite_url, tmp_path)
    assert (result.ok, result.checked) == (True, 3)  # and the one audit.prune record


def test_cli_prune(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def write() -> None:
        async with running_writer(sqlite_url, tmp_path / "spool") as writer:
            for n in range(5):
                writer.submit(entry(n, created_at=utc_now() - timedelta(days=40 - n)))
            writer.submit(entry(5, created_at=utc_now()))

    asyncio.run(write())
    monkeypatch.setenv("ENCLAVE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("ENCLAVE_DATA_DIR", str(tmp_path))
    assert cli.main(["audit", "prune", "--older-than-days", "30"]) == 0
    assert capsys.readouterr().out == "pruned 5 audit records older than 30 days\n"
    [(email,)] = asyncio.run(
        sql(sqlite_url, "SELECT user_email FROM request_records WHERE action = 'audit.prune'")
    )
    assert email == "cli"
    assert cli.main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.startswith("audit chain ok: 2 records\n")
    assert cli.main(["audit", "prune", "--older-than-days", "0"]) == 1
    assert "days must be at least 1" in capsys.readouterr().err
