"""500 entries through the writer make 500 chained rows; editing or removing one is caught.

Runs on SQLite and on Postgres.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from gateway import cli
from tests.gateway.audit.support import entry, request_ids_in_seq_order, running_writer, sql, verify


async def test_500_entries_make_500_rows_in_order_and_the_chain_verifies(
    any_url: str, tmp_path: Path
) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(500):
            writer.submit(entry(n))
        await writer.flush()
        assert writer.pending == 0 and writer.spooled == 0
    assert await request_ids_in_seq_order(any_url) == [f"t-{n}" for n in range(500)]
    [(head_seq, head_hash)] = await sql(any_url, "SELECT head_seq, head_hash FROM audit_chain")
    assert head_seq == 500
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.checked, result.bad_seq) == (True, 500, None)
    assert result.head_hash == head_hash
    # Values read back hash as they did when written (times, floats, NULLs survive the trip).
    [(ttft, latency)] = await sql(
        any_url, "SELECT ttft_ms, latency_ms FROM request_records WHERE seq = 2"
    )
    assert (ttft, latency) == (12.5, 101.25)
    assert not list((tmp_path / "spool").glob("*"))  # nothing was ever spooled


async def test_an_edited_row_is_named(any_url: str, tmp_path: Path) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(300):
            writer.submit(entry(n))
    await sql(any_url, "UPDATE request_records SET completion_tokens = 1 WHERE seq = 137")
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq, result.checked) == (False, 137, 136)
    assert "changed" in result.reason


async def test_a_removed_row_is_named_and_so_is_a_removed_tail(
    any_url: str, tmp_path: Path
) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(300):
            writer.submit(entry(n))
    await sql(any_url, "DELETE FROM request_records WHERE seq >= 290")
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 290)
    assert result.reason == "records 290 to 300 are missing"
    await sql(any_url, "DELETE FROM request_records WHERE seq = 250")
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 250)
    assert result.reason == "record 250 is missing (next is 251)"


async def test_a_rewritten_hash_breaks_the_link_to_the_next_row(
    any_url: str, tmp_path: Path
) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(20):
            writer.submit(entry(n))
    # Editing a row and giving it a fresh (but different) hash: its successor no longer links.
    await sql(any_url, "UPDATE request_records SET hash = '" + "f" * 64 + "' WHERE seq = 5")
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 5)
    await sql(any_url, "UPDATE request_records SET prev_hash = '" + "f" * 64 + "' WHERE seq = 6")
    assert (await verify(any_url, tmp_path)).bad_seq == 5


def test_cli_verify_says_ok_then_names_the_broken_seq(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    async def write() -> None:
        async with running_writer(sqlite_url, tmp_path / "spool") as writer:
            for n in range(40):
                writer.submit(entry(n))

    asyncio.run(write())
    monkeypatch.setenv("ENCLAVE_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("ENCLAVE_DATA_DIR", str(tmp_path))
    assert cli.main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "audit chain ok: 40 records"
    asyncio.run(sql(sqlite_url, "UPDATE request_records SET status_code = 201 WHERE seq = 17"))
    assert cli.main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("audit chain broken at seq 17: ")
