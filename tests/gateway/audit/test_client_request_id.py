"""A caller's X-Request-Id is kept beside the record, never as its id: a caller that reuses an
id cannot make two records look like one (spool replay skips records by their id)."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from gateway.domain.audit.spool import Spool
from gateway.request_context import begin_request
from tests.gateway.audit.support import entry, running_writer, sql, verify
from tests.gateway.helpers import client_for, embedded_gateway
from tests.gateway.traffic.conftest import read_records


def test_two_requests_with_one_client_id_make_two_records_with_ids_of_their_own(
    tmp_path: Path,
) -> None:
    gateway = embedded_gateway(tmp_path)
    with client_for(gateway) as client:
        replies = [
            client.post("/v1/chat/completions", json={}, headers={"x-request-id": "batch-7"})
            for _ in range(2)
        ]
    records = asyncio.run(read_records(gateway.settings.effective_database_url))
    assert [r["status_code"] for r in records] == [401, 401]
    assert [r["client_request_id"] for r in records] == ["batch-7", "batch-7"]
    ours = [r["request_id"] for r in records]
    assert len(set(ours)) == 2 and "batch-7" not in ours
    assert [r.headers["x-request-id"] for r in replies] == ours
    assert {r.headers["x-client-request-id"] for r in replies} == {"batch-7"}


async def test_spool_replay_keeps_both_records_of_a_reused_client_id(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Even at the same instant: replay matches by (request id, time), and the id is ours."""
    ids = []
    for _ in range(2):
        scope: dict[str, object] = {}
        ids.append(begin_request(scope, {b"x-request-id": b"same"}))  # type: ignore[arg-type]
        assert scope["state"] == {"request_id": ids[-1], "client_request_id": "same"}
    first = dataclasses.replace(entry(1), client_request_id="same", request_id=ids[0])
    second = dataclasses.replace(first, request_id=ids[1])
    spool = Spool(tmp_path / "spool")
    spool.append([first, second])  # written while the database was down
    spool.close()
    async with running_writer(sqlite_url, tmp_path / "spool") as writer:
        await writer.flush()
        for _ in range(500):  # start() adopted the file; the first replay takes it in
            if not writer.spooled:
                break
            await asyncio.sleep(0.01)
    rows = await sql(sqlite_url, "SELECT request_id, client_request_id FROM request_records")
    assert sorted(rows) == sorted([(ids[0], "same"), (ids[1], "same")])
    assert (await verify(sqlite_url, tmp_path)).ok
