"""Schemathesis against the gateway's OpenAPI document: a real gateway (uvicorn) in front
of a fake worker, called with an API key, an admin's session and nothing, as each route
needs. The shared run is in tests/fuzz.py."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import schemathesis

from gateway.bench.fake_upstream import MODEL
from gateway.domain.identity.principal import CSRF_HEADER, SESSION_COOKIE
from gateway.openapi import DOCUMENT_ROOT
from tests.fuzz import fuzz, fuzz_stateful, served_model
from tests.gateway.traffic.conftest import running_gateway

# The Litestar routes a key may call (the web UI's reads too): fuzzed with the key.
KEY_READS = frozenset({"/api/me", "/api/me/usage", "/api/status"})


@dataclass
class Session:
    cookie: str
    csrf: str


def session(url: str, email: str, password: str) -> Session:
    signed_in = httpx.post(f"{url}/auth/local/login", json={"email": email, "password": password})
    assert signed_in.status_code == 200, signed_in.text
    return Session(signed_in.cookies[SESSION_COOKIE], signed_in.json()["csrf_token"])


def test_the_gateway_holds_to_its_document(tmp_path: Path, fake_worker: str) -> None:
    # The admin is put in "ops" (users without a department are refused the API).
    with running_gateway(tmp_path, [fake_worker], default_department="ops") as gateway:
        key = {"Authorization": f"Bearer {gateway.department('ops')}"}
        admin = session(gateway.url, "root@example.test", gateway.admin_password)
        # Signing out ends a session: /auth/logout gets one of its own.
        doomed = session(gateway.url, "root@example.test", gateway.admin_password)
        deadline = time.monotonic() + 10
        while not httpx.get(f"{gateway.url}/v1/models", headers=key).json()["data"]:
            assert time.monotonic() < deadline, "the gateway never saw its worker healthy"
            time.sleep(0.05)
        aim = served_model(MODEL)
        cookies = {SESSION_COOKIE: admin.cookie}
        departments = httpx.get(f"{gateway.url}/api/admin/departments", cookies=cookies)
        ops = departments.json()["items"][0]["id"]
        turns = itertools.cycle((True, False))

        def prepare(case: schemathesis.Case) -> dict[str, str]:
            aim(case)
            # Every other key or group mapping is for a department that exists, so that
            # keys get made, and then rotated and revoked by the stateful sequences.
            if isinstance(case.body, dict) and "department_id" in case.body and next(turns):
                case.body["department_id"] = ops
            if case.path.startswith("/v1/") or case.path in KEY_READS:
                case.cookies = {}  # the key alone, not a session schemathesis made up
                return key
            caller = doomed if case.path == "/auth/logout" else admin
            if case.path == "/auth/logout" or case.path.startswith("/api/admin/"):
                case.cookies = {SESSION_COOKIE: caller.cookie}
                return {CSRF_HEADER: caller.csrf}
            return {}

        schema = schemathesis.openapi.from_url(f"{gateway.url}{DOCUMENT_ROOT}/openapi.json")
        failures = fuzz(schema, prepare, max_examples=25)
        admin_api = schema.include(path_regex="^/api/admin/")
        failures += fuzz_stateful(admin_api, prepare, max_examples=10, steps=6)
    assert not failures, "\n\n".join(failures)
