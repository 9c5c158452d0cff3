"""The database goes away: entries are spooled, then replayed exactly once, in order."""

from __future__ import annotations

import asyncio
import shutil
import socket
from pathlib import Path

from sqlalchemy.engine import make_url

from gateway.domain.audit.spool import REJECTED
from tests.gateway.audit.support import entry, request_ids_in_seq_order, running_writer, verify
from tests.gateway.audit.tcp_proxy import TcpProxy


def _via_port(url: str, port: int) -> str:
    return make_url(url).set(host="127.0.0.1", port=port).render_as_string(hide_password=False)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until(condition: object, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def test_postgres_down_then_back_spools_and_replays_exactly_once_in_order(
    postgres_url: str, tmp_path: Path
) -> None:
    target = make_url(postgres_url)
    proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
    await proxy.start()
    spool = tmp_path / "spool"
    async with running_writer(_via_port(postgres_url, proxy.port), spool) as writer:
        for n in range(100):
            writer.submit(entry(n))
        await writer.flush()
        assert writer.spooled == 0

        await proxy.stop()
        for n in range(100, 300):
            writer.submit(entry(n))
        await writer.flush()  # returns: spooled is as good as written
        assert (writer.pending, writer.spooled) == (0, 200)
        assert len(list(spool.glob("*.jsonl"))) == 1
        await asyncio.sleep(0.3)  # a few retries fail while it is still down
        assert writer.spooled == 200

        await proxy.start()  # same port
        for n in range(300, 350):
            writer.submit(entry(n))  # these must land after the spooled ones
        await writer.flush()
        await _until(lambda: writer.spooled == 0)
        await writer.flush()
    assert await request_ids_in_seq_order(postgres_url) == [f"t-{n}" for n in range(350)]
    result = await verify(postgres_url, tmp_path)
    assert (result.ok, result.checked) == (True, 350)
    assert not list(spool.iterdir())
    await proxy.stop()


async def test_a_spool_replayed_twice_writes_nothing_twice(
    postgres_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    async with running_writer(_via_port(postgres_url, _closed_port()), spool) as down:
        for n in range(100):
            down.submit(entry(n))
        await down.flush()
        assert down.spooled == 100
    [left] = list(spool.glob("*.jsonl"))  # closing keeps what the database did not take
    kept = tmp_path / "copy.jsonl"
    shutil.copyfile(left, kept)

    async with running_writer(postgres_url, spool) as up:  # start() replays the old spool
        await _until(lambda: up.spooled == 0)
    assert len(await request_ids_in_seq_order(postgres_url)) == 100

    # A crash after the replay committed and before the file was removed leaves it behind;
    # here it has also gained 20 more records and a line torn by a crash mid-write.
    with kept.open("a", encoding="utf-8") as handle:
        handle.writelines(entry(n).to_json() + "\n" for n in range(100, 120))
        handle.write(entry(999).to_json()[:40])
    shutil.copyfile(kept, left)
    async with running_writer(postgres_url, spool, batch_size=32) as again:
        assert again.spooled == 121
        await _until(lambda: again.spooled == 0)
    assert await request_ids_in_seq_order(postgres_url) == [f"t-{n}" for n in range(120)]
    assert (await verify(postgres_url, tmp_path)).ok
    [rejected] = list(spool.glob(f"*{REJECTED}"))  # the torn line is kept for a human
    assert rejected.read_text() == entry(999).to_json()[:40] + "\n"


async def test_a_live_writers_spool_is_not_taken_by_another(
    sqlite_url: str, tmp_path: Path
) -> None:
    spool = tmp_path / "spool"
    down_url = "sqlite+aiosqlite:///" + str(tmp_path / "missing" / "no.db")
    async with running_writer(down_url, spool) as down:
        down.submit(entry(1))
        await down.flush()
        async with running_writer(sqlite_url, spool) as other:
            await asyncio.sleep(0.2)
            assert other.spooled == 0  # the file is locked by its live owner
        assert down.spooled == 1
    async with running_writer(sqlite_url, spool) as heir:  # the owner is gone: adopted
        await _until(lambda: heir.spooled == 0)
    assert await request_ids_in_seq_order(sqlite_url) == ["t-1"]
