"""What someone with write access to the database (and not the gateway's secret, nor the head
log) tries on the chain, and how `enclave audit verify` catches it."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from gateway import admin_tasks, cli
from gateway.db import migrate
from gateway.db.models import AuditChain, RequestRecord
from gateway.domain.audit.chain import GENESIS_HASH, entry_of, unkeyed_hash
from gateway.domain.audit.entry import FIELD_NAMES
from gateway.domain.audit.head_log import HeadLog
from gateway.domain.audit.writer import AuditWriter
from tests.gateway.audit.support import entry, running_writer, seal_for, sessions, sql, verify
from tests.gateway.helpers import embedded_gateway


async def _write(url: str, data_dir: Path, count: int, tag: str = "t") -> None:
    async with running_writer(url, data_dir / "spool", batch_size=1) as writer:
        for n in range(count):
            writer.submit(entry(n, tag))
            await writer.flush()  # one batch, and so one head-log line, per record


async def _move_head(url: str, seq: int) -> None:
    [(head_hash,)] = await sql(url, f"SELECT hash FROM request_records WHERE seq = {seq}")
    await sql(url, f"UPDATE audit_chain SET head_seq = {seq}, head_hash = '{head_hash}'")


def _cli_verify(
    url: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    monkeypatch.setenv("ENCLAVE_DATABASE_URL", url)
    monkeypatch.setenv("ENCLAVE_DATA_DIR", str(data_dir))
    status = cli.main(["audit", "verify"])
    return status, capsys.readouterr().out.splitlines()


def test_the_reported_attack_deleting_3_and_4_and_moving_the_head_to_2_is_caught(
    sqlite_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    asyncio.run(_write(sqlite_url, tmp_path, 4))
    status, lines = _cli_verify(sqlite_url, tmp_path, monkeypatch, capsys)
    [(head_hash,)] = asyncio.run(sql(sqlite_url, "SELECT head_hash FROM audit_chain"))
    log = tmp_path / "audit-head.log"
    assert status == 0
    assert lines[:2] == ["audit chain ok: 4 records", f"head: seq 4 hash {head_hash}"]
    assert lines[2].startswith("recorded head: seq 4 at 20") and lines[2].endswith(
        f" in {log} (matches)"
    )
    assert log.stat().st_mode & 0o777 == 0o600

    asyncio.run(sql(sqlite_url, "DELETE FROM request_records WHERE seq >= 3"))
    asyncio.run(_move_head(sqlite_url, 2))
    status, lines = _cli_verify(sqlite_url, tmp_path, monkeypatch, capsys)
    assert status == 1
    assert lines[0].startswith(
        "audit chain broken at seq 3: the database's head is seq 2, but seq 4 was recorded in "
        f"{log} at "
    )
    assert lines[0].endswith(": records were removed from the end of the chain")


async def test_a_longer_tail_cut_off_with_the_head_moved_back_is_caught_from_the_head_log(
    any_url: str, tmp_path: Path
) -> None:
    async with running_writer(any_url, tmp_path / "spool") as writer:
        for n in range(300):
            writer.submit(entry(n))
    assert (await verify(any_url, tmp_path)).ok
    await sql(any_url, "DELETE FROM request_records WHERE seq > 250")
    await _move_head(any_url, 250)
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 251)
    assert "but seq 300 was recorded in" in result.reason
    # Without the head log nothing in the database shows it: that is what the log is for.
    (tmp_path / "audit-head.log").unlink()
    assert (await verify(any_url, tmp_path)).ok


async def test_a_head_that_differs_from_the_recorded_one_is_caught(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Another chain put in the database's place (a restored copy of another one, say)."""
    await _write(sqlite_url, tmp_path, 5)
    recorded = f"3 {'d' * 64} 2026-12-03T11:00:00+00:00\n5 {'e' * 64} 2026-12-03T12:00:00+00:00\n"
    (tmp_path / "audit-head.log").write_text(recorded)
    result = await verify(sqlite_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 5)
    assert result.reason == f"its hash is not the one recorded in {tmp_path / 'audit-head.log'}"


async def test_an_edited_row_rehashed_with_sha256_is_caught(any_url: str, tmp_path: Path) -> None:
    """The old, unkeyed chain let anyone recompute every hash after an edit."""
    await _write(any_url, tmp_path, 6)
    (tmp_path / "audit-head.log").unlink()  # the rows alone must show it
    async with sessions(any_url) as db, db.begin() as session:
        rows = (await session.scalars(select(RequestRecord).order_by(RequestRecord.seq))).all()
        rows[2].completion_tokens = 0  # seq 3: the edit
        prev_hash = rows[1].hash
        for row in rows[2:]:  # and every later row rehashed, both ways anyone can
            values = entry_of(row).plain()
            canonical = json.dumps(
                {**values, "seq": row.seq, "prev_hash": prev_hash},
                sort_keys=True,
                separators=(",", ":"),
            )
            full = hashlib.sha256(canonical.encode()).hexdigest()
            row.prev_hash = prev_hash
            row.hash = unkeyed_hash(prev_hash, row.seq, entry_of(row)) if row.seq % 2 else full
            prev_hash = row.hash
        chain = await session.get(AuditChain, 1)
        assert chain is not None
        chain.head_hash = prev_hash
    result = await verify(any_url, tmp_path)
    assert (result.ok, result.bad_seq) == (False, 3)
    assert result.reason == "its contents do not match its hash (changed)"


async def test_records_from_before_keying_stay_verifiable_and_keying_cannot_be_undone(
    tmp_path: Path,
) -> None:
    """A chain written by the unkeyed gateway, upgraded: its records are checked as they were
    hashed (SHA-256), new ones with the HMAC; moving the boundary up is caught."""
    path = tmp_path / "old.db"
    url = f"sqlite+aiosqlite:///{path}"
    await asyncio.to_thread(migrate.upgrade, url, "0002")
    prev_hash = GENESIS_HASH
    for seq in range(1, 4):  # what the unkeyed writer stored
        old = entry(seq, "old")
        row_hash = unkeyed_hash(prev_hash, seq, old)
        values = {name: getattr(old, name) for name in FIELD_NAMES if name in _OLD_COLUMNS}
        columns = ", ".join([*values, "seq", "prev_hash", "hash"])
        literal = ", ".join(_sql_literal(v) for v in [*values.values(), seq, prev_hash, row_hash])
        await sql(url, f"INSERT INTO request_records ({columns}) VALUES ({literal})")
        prev_hash = row_hash
    await sql(url, f"UPDATE audit_chain SET head_seq = 3, head_hash = '{prev_hash}'")
    await asyncio.to_thread(migrate.upgrade, url)
    assert await sql(url, "SELECT keyed_from_seq FROM audit_chain") == [(4,)]

    await _write(url, tmp_path, 2, "new")
    result = await verify(url, tmp_path)
    assert (result.ok, result.checked, result.unkeyed, result.keyed_from_seq) == (True, 5, 3, 4)
    # Calling the keyed records unkeyed (to rehash them with SHA-256) breaks the first one.
    await sql(url, "UPDATE audit_chain SET keyed_from_seq = 6")
    assert (await verify(url, tmp_path)).bad_seq == 4
    await sql(url, "UPDATE audit_chain SET keyed_from_seq = 4")
    await sql(url, "UPDATE request_records SET status_code = 500 WHERE seq = 2")
    assert (await verify(url, tmp_path)).bad_seq == 2
    assert seal_for(tmp_path).head_log.highest() is not None


_OLD_COLUMNS = set(FIELD_NAMES) - {
    "action",
    "target_type",
    "target_id",
    "details",
    "client_request_id",
}


def _sql_literal(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int | float):
        return repr(value)
    if hasattr(value, "isoformat"):
        # SQLite stores the ORM's datetimes as naive UTC text.
        return "'" + value.replace(tzinfo=None).isoformat(sep=" ") + "'"  # type: ignore[attr-defined]
    return "'" + str(value).replace("'", "''") + "'"


async def test_a_head_log_that_cannot_be_written_loses_no_record(
    sqlite_url: str, tmp_path: Path
) -> None:
    (tmp_path / "not-a-dir").write_text("")
    seal = dataclasses.replace(
        seal_for(tmp_path), head_log=HeadLog(tmp_path / "not-a-dir" / "heads.log")
    )
    async with sessions(sqlite_url) as db:
        writer = AuditWriter(db, tmp_path / "spool", seal, flush_interval=0.005)
        await writer.start()
        for n in range(3):
            writer.submit(entry(n))
        await writer.close()
        assert writer.spooled == 0
    assert len(await sql(sqlite_url, "SELECT seq FROM request_records")) == 3
    assert (await verify(sqlite_url, tmp_path)).ok


def test_the_head_file_setting_moves_the_head_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    elsewhere = tmp_path / "mounted" / "enclave-heads.log"
    gateway = embedded_gateway(tmp_path / "data", audit_head_file=str(elsewhere))
    asyncio.run(admin_tasks.create_department(gateway.settings, "Office", "office"))
    assert not (tmp_path / "data" / "audit-head.log").exists()
    assert [line.split()[0] for line in elsewhere.read_text().splitlines()] == ["1", "2"]
    monkeypatch.setenv("ENCLAVE_AUDIT_HEAD_FILE", str(elsewhere))
    status, lines = _cli_verify(
        gateway.settings.effective_database_url, tmp_path / "data", monkeypatch, capsys
    )
    assert status == 0 and lines[-1].endswith(f" in {elsewhere} (matches)")
    monkeypatch.delenv("ENCLAVE_AUDIT_HEAD_FILE")
    status, lines = _cli_verify(
        gateway.settings.effective_database_url, tmp_path / "data", monkeypatch, capsys
    )
    assert status == 0 and lines[-1].startswith("warning: no head recorded in ")
