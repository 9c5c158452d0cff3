"""The console API calls `enclave bench console` measures, with parameters from the data.

A deep page is the page ``DEEP_PAGES`` pages in (or the last, in a shorter list): its cursor
is found once, by following ``next_cursor``, and then that one page is asked for each time.
An export streams every matching row, so only its first ``EXPORT_BYTES`` are read (the time
to the first screenful, and what the database does for them); the rest is left unread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlencode

import httpx

from gateway.bench.console_seed import Seeded

DEEP_PAGES = 5
EXPORT_BYTES = 64 * 1024
Params = dict[str, str]


@dataclass(frozen=True)
class Call:
    name: str
    path: str
    params: Params = field(default_factory=dict)
    deep: bool = False
    stream: bool = False

    def describe(self) -> str:
        query = f"?{urlencode(self.params)}" if self.params else ""
        return f"GET {self.path}{query}" + (" with a deep page's cursor" if self.deep else "")

    async def prepare(self, client: httpx.AsyncClient) -> tuple[Params, int]:
        """The parameters to measure with (a deep page's add its cursor), and the page's
        number; LookupError when a deep page is asked of a list with one page."""
        if not self.deep:
            return self.params, 1
        params, page = dict(self.params), 1
        while page <= DEEP_PAGES:
            response = await client.get(self.path, params=params)
            response.raise_for_status()
            cursor = response.json()["next_cursor"]
            if cursor is None:
                break
            params["after"], page = cursor, page + 1
        if page == 1:
            raise LookupError("one page only: no deep page")
        return params, page

    async def fetch(self, client: httpx.AsyncClient, params: Params) -> tuple[int, int]:
        """One call; its status and how many bytes of the body were read."""
        if not self.stream:
            response = await client.get(self.path, params=params)
            return response.status_code, len(response.content)
        size = 0
        async with client.stream("GET", self.path, params=params) as response:
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size >= EXPORT_BYTES:
                    break
        return response.status_code, size


def calls_for(seeded: Seeded, users: int, keys: int) -> list[Call]:
    """Every list first and deep, the searches with a common and a rare match (a rare one
    reads the whole table to fill a page), and the audit log's and usage's reads."""
    department = str(seeded.busiest_department or seeded.department_ids[0])
    middle_seq = str((seeded.first_seq + seeded.last_seq) // 2)
    audit, usage = "/api/admin/audit/", "/api/admin/usage/"
    lists = [
        Call("departments", "/api/admin/departments/"),
        Call("group_mappings", "/api/admin/group-mappings/"),
        Call("users", "/api/admin/users/"),
        Call("users_q_common", "/api/admin/users/", {"q": "smith"}),
        Call("users_q_rare", "/api/admin/users/", {"q": f"{users // 2}@example"}),
        Call("users_department", "/api/admin/users/", {"department_id": department}),
        Call("keys", "/api/admin/keys/"),
        Call("keys_department", "/api/admin/keys/", {"department_id": department}),
        Call("keys_q_common", "/api/admin/keys/", {"q": "summarizer"}),
        Call("keys_q_rare", "/api/admin/keys/", {"q": f"-{keys // 2}"}),
        Call("audit", audit),
        Call("audit_department", audit, {"department_id": department}),
        Call("audit_status_429", audit, {"status": "429"}),
        Call("audit_action", audit, {"action": "key.revoke"}),
        Call("audit_action_prefix", audit, {"action": "key.*"}),
    ]
    calls: list[Call] = []
    for call in lists:
        calls += [call, Call(call.name + "_deep", call.path, call.params, deep=True)]
    return [
        *calls,
        Call("audit_record", audit + middle_seq),
        Call("audit_export_csv_first_64kb", "/api/admin/audit/export.csv", stream=True),
        Call("usage_daily_30_days", usage + "daily"),
        Call("usage_daily_30_days_department", usage + "daily", {"department_id": department}),
        Call("usage_top_users", usage + "top", {"by": "user"}),
        Call("usage_top_keys", usage + "top", {"by": "key"}),
        Call("usage_refusals", usage + "refusals"),
        Call("usage_export_csv_first_64kb", usage + "export.csv", stream=True),
        Call("workers", "/api/admin/workers/"),
    ]  # fmt: skip
