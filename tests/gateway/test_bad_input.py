"""Hostile input on the gateway's routes: every one a clear 4xx, never a 500.

The Litestar routes answer ``{"status_code", "detail"}``, the OpenAI API OpenAI's error
body. The database-specific refusals (a NUL character, a number past the column's integer
type) run on Postgres, where they used to be 500s; the rest on the embedded SQLite.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from litestar import get
from litestar.testing import TestClient
from structlog.testing import capture_logs

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.identity import pending_login
from gateway.domain.identity.pending_login import LOGIN_COOKIE, PendingLogin
from gateway.domain.proxy import handlers
from gateway.domain.proxy.body import parse
from gateway.domain.proxy.openai_errors import ApiError
from gateway.secret_store import resolve_secret_key
from tests.gateway.helpers import ADMIN_EMAIL, Gateway, embedded_gateway, sign_in
from tests.gateway.postgres import fresh_postgres

DEEP_ARRAY = b"[" * 5000 + b"]" * 5000
DEEP_OBJECT = b'{"a":' * 5000 + b"1" + b"}" * 5000
JSON = {"content-type": "application/json"}


def _gateway(tmp_path: Path, **overrides: object) -> Gateway:
    # The admin has no department of its own: the default one lets it reach /v1.
    gateway = embedded_gateway(tmp_path, default_department="ops", **overrides)
    asyncio.run(admin_tasks.create_department(gateway.settings, "Ops", "ops"))
    return gateway


@pytest.fixture
def gateway(tmp_path: Path) -> Gateway:
    return _gateway(tmp_path)


@pytest.fixture
def admin(gateway: Gateway) -> Iterator[tuple[TestClient, dict[str, str]]]:
    """A client signed in as the admin, and the CSRF header its writes need."""
    with TestClient(app=create_app(gateway.settings), raise_server_exceptions=False) as client:
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        yield client, {"x-csrf-token": csrf}


def _litestar_4xx(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status_code"] == status
    return str(body["detail"])


def _openai_4xx(response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    return str(error["message"])


def test_deep_json_is_a_400_on_every_kind_of_route(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, csrf = admin
    for body in (DEEP_ARRAY, DEEP_OBJECT):
        login = client.post("/auth/local/login", content=body, headers=JSON)
        assert "nested too deeply" in _litestar_4xx(login)
        department = client.post("/api/admin/departments/", content=body, headers=JSON | csrf)
        assert "nested too deeply" in _litestar_4xx(department)
        api = client.post("/v1/chat/completions", content=body, headers=JSON | csrf)
        assert "nested too deeply" in _openai_4xx(api)


def test_api_bodies_the_gateway_reads_must_have_their_shape(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, csrf = admin
    bad = [
        ("/v1/chat/completions", {"model": "m", "messages": {"role": "user"}}, "messages"),
        ("/v1/chat/completions", {"model": "m", "messages": ["hello"]}, "messages"),
        ("/v1/completions", {"model": "m", "prompt": [1, "a", None]}, "prompt"),
        ("/v1/completions", {"model": "m", "prompt": {"text": "a"}}, "prompt"),
        ("/v1/chat/completions", {"model": "m", "messages": [], "n": 10**30}, "n"),
        ("/v1/chat/completions", {"model": "m", "messages": [], "max_tokens": 2**70}, "max_tokens"),
    ]
    for path, body, param in bad:
        response = client.post(path, json=body, headers=csrf)
        _openai_4xx(response)
        assert response.json()["error"]["param"] == param, (body, response.text)


def test_every_prompt_shape_openai_allows_is_read_without_error() -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": [{"text": 5}, "x", {}]}]}
    prompts = ["text", ["a", "b"], [1, 2, 3], [[1, 2], [3]], [[1], "a"]]
    requests = [parse("chat.completions", _encode(chat))]
    requests += [parse("completions", _encode({"model": "m", "prompt": p})) for p in prompts]
    for request in requests:
        # What the proxy computes from a body before it picks a worker and admits it.
        assert request.estimated_prompt_tokens() >= 0
        assert len(request.affinity_key()) == 32
        assert request.reserved_tokens(None) > 0
    with pytest.raises(ApiError, match="nested too deeply"):
        parse("completions", DEEP_OBJECT)
    with pytest.raises(ApiError, match="non-empty"):  # no prompt at all: nothing to run
        parse("completions", _encode({"model": "m", "prompt": []}))


def test_lists_for_objects_and_lone_surrogates_are_400(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, csrf = admin
    surrogate = b'{"name": "\\ud800", "slug": "s", "email": "\\udfff", "password": "p"}'
    for body in (b"[1, 2]", b'"text"', b"null", surrogate):
        _litestar_4xx(client.post("/auth/local/login", content=body, headers=JSON))
        created = client.post("/api/admin/departments/", content=body, headers=JSON | csrf)
        _litestar_4xx(created)
    for body in (b"[1, 2]", b'"text"', b"null", b'{"model": "\\ud800", "messages": []}'):
        _openai_4xx(client.post("/v1/chat/completions", content=body, headers=JSON | csrf))


def test_api_bodies_over_the_cap_are_413_before_they_are_read(tmp_path: Path) -> None:
    gateway = _gateway(tmp_path, api_body_max_bytes=1000)
    with TestClient(app=create_app(gateway.settings), raise_server_exceptions=False) as client:
        csrf = {"x-csrf-token": sign_in(client, ADMIN_EMAIL, gateway.admin_password)}
        big = {"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}
        response = client.post("/v1/chat/completions", json=big, headers=csrf)
        assert "larger than 1000 bytes" in _openai_4xx(response, 413)

        # A Content-Length that promises more is refused without waiting for the body.
        def one_chunk() -> Iterator[bytes]:
            yield b'{"model": "m"}'

        claimed = csrf | {"content-length": str(10**12)}
        response = client.post("/v1/chat/completions", content=one_chunk(), headers=claimed)
        _openai_4xx(response, 413)


def test_query_and_path_values_out_of_range_are_4xx(
    admin: tuple[TestClient, dict[str, str]],
) -> None:
    client, _ = admin
    for path in (
        "/api/admin/users/",
        "/api/admin/departments/",
        "/api/admin/keys/",
        "/api/admin/group-mappings/",
        "/api/admin/audit/",
    ):
        for query in ("limit=-1", "limit=0", f"limit={10**30}", "limit=x", f"after={10**30}"):
            _litestar_4xx(client.get(f"{path}?{query}"))
        _litestar_4xx(client.get(f"{path}?after=%00"))
    _litestar_4xx(client.get("/api/admin/audit/?request_id=a%00b"))
    _litestar_4xx(client.get("/api/admin/audit/export.csv?since=9999-12-31T23:59:59-23:59"))
    _litestar_4xx(client.get(f"/api/admin/audit/{10**30}"), 404)
    _litestar_4xx(client.get("/api/admin/keys/?department_id=not-a-uuid"))
    for method in ("GET", "PATCH"):
        response = client.request(method, "/api/admin/departments/not-a-uuid", json={})
        assert 400 <= response.status_code < 500, (method, response.text)


def test_bad_credentials_are_401_not_500(gateway: Gateway) -> None:
    with TestClient(app=create_app(gateway.settings), raise_server_exceptions=False) as client:
        odd = [
            {"authorization": b"Bearer sk-enc-\xe9\xff"},
            {"authorization": b"Bearer \xc3\xa9"},
            {"cookie": b"enclave_session=\xff\xfe; =; \x01"},
            {"cookie": b'enclave_session="\\'},
        ]
        for headers in odd:
            me = client.get("/api/me", headers=headers)  # type: ignore[arg-type]
            _litestar_4xx(me, 401)
            api = client.get("/v1/models", headers=headers)  # type: ignore[arg-type]
            assert api.status_code == 401, api.text
            assert api.json()["error"]["type"] == "authentication_error"


def test_the_oidc_callback_refuses_odd_state_and_cookies_with_401(tmp_path: Path) -> None:
    gateway = embedded_gateway(
        tmp_path, oidc_issuer="http://127.0.0.1:9", oidc_client_id="enclave"
    )  # nothing listens there: every case must be refused before the IdP is asked
    valid = pending_login.encode(
        resolve_secret_key(gateway.settings),
        PendingLogin("expected-state", "nonce", "v" * 64, int(time.time()) + 600),
    )
    cases = [
        (valid, "%C3%A9t%C3%A9"),  # a non-ASCII state against a genuine cookie
        (valid, "%ED%A0%80"),  # UTF-8 of a lone surrogate
        ("\u00e9t\u00e9.sig\u00e9", "expected-state"),  # a non-ASCII cookie
        ("!!!.???", "expected-state"),  # not base64 at all
        ("e30." + "A" * 43, "expected-state"),  # forged signature
        ("", "expected-state"),
    ]
    with TestClient(app=create_app(gateway.settings), raise_server_exceptions=False) as client:
        for cookie, state in cases:
            client.cookies.clear()
            headers = {"cookie": f"{LOGIN_COOKIE}={cookie}".encode()} if cookie else {}
            response = client.get(
                f"/auth/callback?code=x&state={state}",
                headers=headers,  # type: ignore[arg-type]
                follow_redirects=False,
            )
            assert "start the login again" in _litestar_4xx(response, 401), (cookie, state)


def test_database_refusals_are_400_on_postgres(tmp_path: Path) -> None:
    with fresh_postgres(os.environ["TEST_DATABASE_URL"]) as url:
        gateway = embedded_gateway(tmp_path, database_url=url)
        with TestClient(app=create_app(gateway.settings), raise_server_exceptions=False) as client:
            login = client.post("/auth/local/login", json={"email": "a\u0000b", "password": "x"})
            assert "email" in _litestar_4xx(login)
            csrf = {"x-csrf-token": sign_in(client, ADMIN_EMAIL, gateway.admin_password)}
            created = client.post(
                "/api/admin/departments/", json={"name": "Ok", "slug": "ok"}, headers=csrf
            )
            department = created.json()["id"]
            writes = [
                ("POST", "/api/admin/departments/", {"name": "a\u0000", "slug": "a"}, "name"),
                ("POST", "/api/admin/departments/", {"name": "x" * 201, "slug": "b"}, "name"),
                (
                    "POST",
                    "/api/admin/departments/",
                    {"name": "c", "slug": "c", "requests_per_minute": 2**31},
                    "requests_per_minute",
                ),
                (
                    "POST",
                    "/api/admin/departments/",
                    {"name": "d", "slug": "d", "monthly_token_quota": 2**63},
                    "monthly_token_quota",
                ),
                ("PATCH", f"/api/admin/departments/{department}", {"name": "\u0000"}, "name"),
                (
                    "POST",
                    "/api/admin/group-mappings/",
                    {"group": "g\u0000", "department_id": department},
                    "group",
                ),
                (
                    "POST",
                    "/api/admin/keys/",
                    {"name": "k\u0000", "department_id": department},
                    "name",
                ),
                (
                    "POST",
                    "/api/admin/keys/",
                    {"name": "k", "department_id": department, "concurrent_requests": 2**40},
                    "concurrent_requests",
                ),
            ]
            for method, path, body, field in writes:
                response = client.request(method, path, json=body, headers=csrf)
                assert field in _litestar_4xx(response), (method, path, body)
            _litestar_4xx(client.get(f"/api/admin/audit/?after={2**63}"))
            _litestar_4xx(client.get(f"/api/admin/audit/{2**63}"), 404)
            _litestar_4xx(client.get("/api/admin/audit/?request_id=%00"))
            # The largest values the columns hold are still accepted.
            edge = {"name": "e", "slug": "e", "requests_per_minute": 2**31 - 1}
            edge["monthly_token_quota"] = 2**63 - 1
            accepted = client.post("/api/admin/departments/", json=edge, headers=csrf)
            assert accepted.status_code == 201, accepted.text


def test_an_unhandled_error_is_logged_once_and_answered_with_a_generic_500(
    gateway: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    @get("/boom", sync_to_thread=False)
    def boom() -> None:
        raise RuntimeError("a bug, with a secret detail")

    app = create_app(gateway.settings, [boom])
    with TestClient(app=app, raise_server_exceptions=False) as client:
        csrf = {"x-csrf-token": sign_in(client, ADMIN_EMAIL, gateway.admin_password)}
        with capture_logs() as logs:
            response = client.get("/boom")
        assert response.status_code == 500
        assert response.json() == {
            "status_code": 500,
            "detail": "the gateway failed on this request; its log has the details",
        }
        failures = [entry for entry in logs if entry.get("exc_info")]
        assert len(failures) == 1, logs
        assert isinstance(failures[0]["exc_info"], RuntimeError)

        def broken(endpoint: str, raw: bytes) -> None:
            raise RuntimeError("a bug in the proxy")

        monkeypatch.setattr(handlers, "parse", broken)
        body = {"model": "m", "messages": []}
        with capture_logs() as logs:
            response = client.post("/v1/chat/completions", json=body, headers=csrf)
        assert response.status_code == 500
        assert "its log has the details" in response.json()["error"]["message"]
        assert "a bug" not in response.text
        assert len([entry for entry in logs if entry.get("exc_info")]) == 1, logs


def _encode(body: object) -> bytes:
    import msgspec

    return msgspec.json.encode(body)
