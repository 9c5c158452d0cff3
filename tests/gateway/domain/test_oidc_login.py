"""Full logins against the real oidc-provider, and the ways a login must be refused."""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import create_app
from gateway.domain.identity import pending_login
from gateway.domain.identity.oidc import OidcClient, OidcError
from gateway.domain.identity.pending_login import LOGIN_COOKIE, PendingLogin
from gateway.settings import Settings
from tests.gateway.oidc_provider import (
    CLIENT_ID,
    CLIENT_SECRET,
    GATEWAY_BASE,
    OTHER_CLIENT_ID,
    OTHER_CLIENT_SECRET,
    RunningProvider,
    sign_in_at_provider,
)
from tests.gateway.traffic.conftest import read_records


def _settings(tmp_path: Path, issuer: str, client_id: str = CLIENT_ID) -> Settings:
    secret = CLIENT_SECRET if client_id == CLIENT_ID else OTHER_CLIENT_SECRET
    return Settings(
        data_dir=tmp_path,
        public_url=GATEWAY_BASE,
        oidc_issuer=issuer,
        oidc_client_id=client_id,
        oidc_client_secret=secret,
        oidc_admin_group="enclave-admins",
    )


def _prepared(tmp_path: Path, issuer: str) -> Settings:
    settings = _settings(tmp_path, issuer)
    admin_tasks.migrate_database(settings)
    asyncio.run(admin_tasks.create_department(settings, "Research", "research"))
    asyncio.run(admin_tasks.create_department(settings, "Legal", "legal"))
    return settings


def _start(client: TestClient) -> str:
    response = client.get("/auth/login", follow_redirects=False)
    assert response.status_code in (302, 303), response.text
    return response.headers["location"]


def _callback(client: TestClient, url: str) -> httpx.Response:
    parts = urlsplit(url)
    return client.get(f"{parts.path}?{parts.query}", follow_redirects=False)


def test_two_users_land_in_their_departments_with_their_roles(
    tmp_path: Path, oidc_provider: RunningProvider
) -> None:
    settings = _prepared(tmp_path, oidc_provider.issuer)
    with TestClient(app=create_app(settings), base_url=GATEWAY_BASE) as admin_client:
        # The web app offers the SSO button only where it works.
        assert admin_client.get("/auth/methods").json() == {"sso": True, "local": True}
        # research-team -> research comes from the mapping table; bob's "legal" by name.
        bob_back = sign_in_at_provider(_start(admin_client), "bob")
        assert _callback(admin_client, bob_back).status_code in (302, 303)
        bob = admin_client.get("/api/me").json()
        assert bob["user"]["role"] == "admin" and bob["department"] == "legal"
        csrf = bob["csrf_token"]
        research = admin_client.get("/api/admin/departments/").json()["items"]
        research_id = next(d["id"] for d in research if d["slug"] == "research")
        mapped = admin_client.post(
            "/api/admin/group-mappings/",
            json={"group": "research-team", "department_id": research_id},
            headers={"x-csrf-token": csrf},
        )
        assert mapped.status_code == 201, mapped.text
        out = admin_client.post("/auth/logout", headers={"x-csrf-token": csrf}).json()
        # The IdP has an end_session_endpoint: logout goes there with the ID token hint.
        assert out["redirect"].startswith(oidc_provider.issuer)
        assert "id_token_hint" in parse_qs(urlsplit(out["redirect"]).query)
        assert admin_client.get("/api/me").status_code == 401
    with TestClient(app=create_app(settings), base_url=GATEWAY_BASE) as client:
        alice_back = sign_in_at_provider(_start(client), "alice")
        assert _callback(client, alice_back).status_code in (302, 303)
        alice = client.get("/api/me").json()
        assert alice["user"]["email"] == "alice@example.test"
        assert alice["user"]["role"] == "member" and alice["department"] == "research"
        assert client.get("/api/admin/users/").status_code == 403
    # Each sign-in, the admin's change and the sign-out are in the audit chain.
    records = asyncio.run(read_records(settings.effective_database_url, None))
    assert [(r["action"], r["user_email"]) for r in records if r["user_email"] != "cli"] == [
        ("auth.login", "bob@example.test"),
        ("group_mapping.create", "bob@example.test"),
        ("auth.logout", "bob@example.test"),
        ("auth.login", "alice@example.test"),
    ]
    assert records[-1]["details"] == '{"method": "oidc"}'


def test_tampered_state_and_replayed_code_are_refused(
    tmp_path: Path, oidc_provider: RunningProvider
) -> None:
    settings = _prepared(tmp_path, oidc_provider.issuer)
    with TestClient(app=create_app(settings), base_url=GATEWAY_BASE) as client:
        back = sign_in_at_provider(_start(client), "alice")
        tampered = back.replace("state=", "state=x")
        cookie = client.cookies.get(LOGIN_COOKIE)
        assert _callback(client, tampered).status_code == 401
        assert client.get("/api/me").status_code == 401
        assert _callback(client, back).status_code in (302, 303)  # the real one still works
        client.cookies.set(LOGIN_COOKIE, str(cookie))
        replay = _callback(client, back)
        assert replay.status_code == 401 and "refused the login code" in replay.json()["detail"]
    records = asyncio.run(read_records(settings.effective_database_url, None))
    assert [r["action"] for r in records if r["action"].startswith("auth.")] == [
        "auth.login_failed",
        "auth.login",
        "auth.login_failed",
    ]


def test_wrong_verifier_and_wrong_nonce_are_refused(
    tmp_path: Path, oidc_provider: RunningProvider
) -> None:
    settings = _prepared(tmp_path, oidc_provider.issuer)
    with TestClient(app=create_app(settings), base_url=GATEWAY_BASE) as client:
        secret_key = client.app.state.gateway.secret_key
        for field in ("code_verifier", "nonce"):
            client.cookies.clear()
            back = sign_in_at_provider(_start(client), "alice")
            real = pending_login.decode(secret_key, str(client.cookies.get(LOGIN_COOKIE)))
            assert real is not None
            forged = (
                dataclasses.replace(real, code_verifier="f" * 64)
                if field == "code_verifier"
                else dataclasses.replace(real, nonce="f" * 64)
            )
            client.cookies.clear()
            client.cookies.set(LOGIN_COOKIE, pending_login.encode(secret_key, forged))
            response = _callback(client, back)
            assert response.status_code == 401, field
            assert client.get("/api/me").status_code == 401


def test_id_token_for_another_audience_is_refused(
    tmp_path: Path, oidc_provider: RunningProvider
) -> None:
    """A genuine, correctly signed ID token from the same IdP, but issued to another client."""
    other = OidcClient(_settings(tmp_path, oidc_provider.issuer, OTHER_CLIENT_ID))
    pending = PendingLogin.new()
    back = sign_in_at_provider(asyncio.run(other.authorization_url(pending)), "alice")
    query = parse_qs(urlsplit(back).query)
    claims = asyncio.run(other.finish(pending, query["state"][0], query["code"][0]))
    assert claims["aud"] == OTHER_CLIENT_ID  # the other client accepts its own token
    ours = OidcClient(_settings(tmp_path, oidc_provider.issuer))
    with pytest.raises(OidcError, match="not valid"):
        asyncio.run(ours.verify_id_token(claims["_id_token"], pending.nonce))
    with pytest.raises(OidcError):  # and a token whose signature was tampered with
        asyncio.run(other.verify_id_token(claims["_id_token"][:-4] + "AAAA", pending.nonce))


def test_an_unreachable_provider_is_a_clear_503(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nothing listens on once the socket closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    settings = _prepared(tmp_path, f"http://127.0.0.1:{port}")
    with TestClient(app=create_app(settings)) as client:
        response = client.get("/auth/login", follow_redirects=False)
    assert response.status_code == 503
    assert "did not answer" in response.json()["detail"]
    assert "break-glass" in response.json()["detail"]


def test_the_scopes_asked_for_follow_the_setting(
    tmp_path: Path, oidc_provider: RunningProvider
) -> None:
    # Entra ID and Google refuse a `groups` scope: without it the login still completes.
    settings = dataclasses.replace(
        _prepared(tmp_path, oidc_provider.issuer), oidc_scopes="openid  email profile"
    )
    with TestClient(app=create_app(settings), base_url=GATEWAY_BASE) as client:
        location = _start(client)
        assert parse_qs(urlsplit(location).query)["scope"] == ["openid email profile"]
        assert _callback(client, sign_in_at_provider(location, "alice")).status_code in (302, 303)
        assert client.get("/api/me").json()["user"]["email"] == "alice@example.test"
