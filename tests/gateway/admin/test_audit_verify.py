"""`POST /api/admin/audit/verify`: the chain check from the console, itself audited."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gateway.domain.audit.console_verify import VerifyRead
from gateway.domain.audit.head_log import HeadLog
from tests.gateway.admin.conftest import Console
from tests.gateway.audit.support import sql
from tests.gateway.traffic.conftest import read_records


def flushed_records(console: Console, action: str) -> list[dict[str, Any]]:
    client = console.client
    client.blocking_portal.call(client.app.state.gateway.audit.flush)
    url = console.gateway.settings.effective_database_url
    return [r for r in asyncio.run(read_records(url, None)) if r["action"] == action]


def verify(console: Console) -> dict[str, Any]:
    console.client.blocking_portal.call(console.client.app.state.gateway.audit.flush)
    reply = console.client.post("/api/admin/audit/verify", headers=console.writes)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    assert set(body) == set(VerifyRead.__struct_fields__)
    return body


def test_a_sound_chain_then_a_changed_record(console: Console) -> None:
    writes = console.writes
    console.client.post(
        "/api/admin/departments", json={"name": "Ops", "slug": "ops"}, headers=writes
    )
    sound = verify(console)
    assert sound["ok"] is True and sound["bad_seq"] is None and sound["reason"] == ""
    assert sound["checked"] >= 2 and sound["head_seq"] == sound["checked"]
    assert sound["head_log_matches"] is True
    assert sound["recorded_head"]["seq"] == sound["head_seq"]
    assert sound["duration_ms"] >= 0 and sound["started_at"]

    [record] = flushed_records(console, "audit.verify")
    assert record["target_type"] == "audit_chain" and record["status_code"] == 200
    assert json.loads(record["details"]) == {
        "ok": True,
        "checked": sound["checked"],
        "head_seq": sound["head_seq"],
    }

    # Someone edits a record in the database: the check names it.
    url = console.gateway.settings.effective_database_url
    asyncio.run(sql(url, "UPDATE request_records SET status_code = 299 WHERE seq = 2"))
    broken = verify(console)
    assert broken["ok"] is False and broken["bad_seq"] == 2
    assert "changed" in broken["reason"]
    latest = json.loads(flushed_records(console, "audit.verify")[-1]["details"])
    assert latest["ok"] is False and latest["bad_seq"] == 2


def test_a_tail_cut_off_disagrees_with_the_head_log(console: Console) -> None:
    head = verify(console)["head_seq"]  # its own record is appended after it
    url = console.gateway.settings.effective_database_url
    console.client.blocking_portal.call(console.client.app.state.gateway.audit.flush)
    [(last,)] = asyncio.run(sql(url, "SELECT max(seq) FROM request_records"))
    assert last > head
    [(prev_hash,)] = asyncio.run(sql(url, f"SELECT hash FROM request_records WHERE seq = {head}"))
    asyncio.run(sql(url, f"DELETE FROM request_records WHERE seq > {head}"))
    asyncio.run(sql(url, f"UPDATE audit_chain SET head_seq = {head}, head_hash = '{prev_hash}'"))
    reply = console.client.post("/api/admin/audit/verify", headers=console.writes)
    cut = reply.json()
    assert cut["ok"] is False and cut["head_log_matches"] is False, cut
    assert cut["recorded_head"]["seq"] == last and "removed" in cut["reason"]


def test_an_unreadable_head_log_is_a_503(
    sqlite_console: Console, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreadable(self: HeadLog) -> None:
        raise PermissionError(13, "Permission denied", str(self.path))

    monkeypatch.setattr(HeadLog, "highest", unreadable)
    reply = sqlite_console.client.post("/api/admin/audit/verify", headers=sqlite_console.writes)
    assert reply.status_code == 503 and "head log" in reply.json()["detail"], reply.text


def test_members_and_api_keys_are_refused(sqlite_console: Console) -> None:
    sqlite_console.refused_to_others("POST", "/api/admin/audit/verify")
    # An admin's session without its CSRF token: refused like every write.
    assert sqlite_console.client.post("/api/admin/audit/verify").status_code == 403
