"""The route table, as standing proof: every route the gateway serves, who may call it.

The routes come from the app itself (its Litestar routes, and the OpenAI API paths that
`entry.py` serves ahead of the router), so a new route cannot be forgotten: one missing
from GUARDS below fails the test until someone decides, here, who may call it. Each route
is called with no credentials, a member's session, an API key and an admin's session, and
under spellings of its path that a router might treat differently from the guard.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx
from litestar import Litestar, get, post
from litestar.routes import ASGIRoute, HTTPRoute
from litestar.testing import TestClient

from gateway import admin_tasks
from gateway.app import PUBLIC_PATHS, create_app
from gateway.bench.fake_upstream import MODEL
from gateway.domain.identity.principal import CSRF_HEADER, SESSION_COOKIE
from gateway.domain.proxy.handlers import API_ROUTES
from gateway.web_app import ASSETS_ROUTE
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway

PUBLIC = "public"  # anyone
USER = "user"  # a signed-in user (session), nothing else
USER_OR_KEY = "user or key"  # a signed-in user or an API key
ADMIN = "admin"  # a signed-in admin

# Who may call what: (path as the app declares it) -> {method: guard}.
GUARDS: dict[str, dict[str, str]] = {
    "/health": {"GET": PUBLIC},
    # The OpenAPI document (gateway/openapi.py), and Litestar's 404 for the rest below it.
    "/schema": {"GET": PUBLIC},
    "/schema/openapi.json": {"GET": PUBLIC},
    "/schema/{path:str}": {"GET": PUBLIC},
    "/metrics": {"GET": PUBLIC},
    "/auth/local/login": {"POST": PUBLIC},
    "/auth/login": {"GET": PUBLIC},
    "/auth/callback": {"GET": PUBLIC},
    "/auth/methods": {"GET": PUBLIC},
    # The web app's hashed files; every other path of the app is the 404 handler's page.
    ASSETS_ROUTE: {"GET": PUBLIC},
    "/auth/logout": {"POST": USER},
    "/api/me": {"GET": USER_OR_KEY},
    "/api/me/usage": {"GET": USER_OR_KEY},
    "/api/status": {"GET": USER_OR_KEY},
    "/v1/chat/completions": {"POST": USER_OR_KEY},
    "/v1/completions": {"POST": USER_OR_KEY},
    "/v1/models": {"GET": USER_OR_KEY},
    "/api/admin/departments": {"GET": ADMIN, "POST": ADMIN},
    "/api/admin/departments/{department_id:uuid}": {"GET": ADMIN, "PATCH": ADMIN},
    "/api/admin/group-mappings": {"GET": ADMIN, "POST": ADMIN},
    "/api/admin/group-mappings/{mapping_id:uuid}": {"DELETE": ADMIN},
    "/api/admin/users": {"GET": ADMIN},
    "/api/admin/users/{user_id:uuid}": {"PATCH": ADMIN},
    "/api/admin/keys": {"GET": ADMIN, "POST": ADMIN},
    "/api/admin/keys/{key_id:uuid}": {"PATCH": ADMIN},
    "/api/admin/keys/{key_id:uuid}/revoke": {"POST": ADMIN},
    "/api/admin/keys/{key_id:uuid}/rotate": {"POST": ADMIN},
    "/api/admin/audit": {"GET": ADMIN},
    "/api/admin/audit/export.csv": {"GET": ADMIN},
    "/api/admin/audit/{seq:int}": {"GET": ADMIN},
    "/api/admin/usage/daily": {"GET": ADMIN},
    "/api/admin/usage/top": {"GET": ADMIN},
    "/api/admin/usage/refusals": {"GET": ADMIN},
    "/api/admin/usage/export.csv": {"GET": ADMIN},
    "/api/admin/audit/verify": {"POST": ADMIN},
    "/api/admin/workers": {"GET": ADMIN},
    "/api/admin/workers/{index:int}/drain": {"POST": ADMIN},
    "/api/admin/workers/{index:int}/restart": {"POST": ADMIN},
    "/api/admin/workers/{index:int}/reload": {"POST": ADMIN},
    "/api/admin/assistants": {"GET": ADMIN, "POST": ADMIN},
    "/api/admin/assistants/{assistant_id:uuid}": {"GET": ADMIN, "PATCH": ADMIN, "DELETE": ADMIN},
    "/api/admin/assistants/{assistant_id:uuid}/versions": {"GET": ADMIN},
    "/api/admin/assistants/tokens": {"POST": ADMIN},
    "/api/admin/assistants/extract": {"POST": ADMIN},
    "/api/assistants": {"GET": USER},
    "/api/conversations": {"GET": USER, "POST": USER},
    "/api/conversations/search": {"GET": USER},
    "/api/conversations/{conversation_id:uuid}": {"GET": USER, "PATCH": USER, "DELETE": USER},
    "/api/conversations/{conversation_id:uuid}/messages": {"POST": USER},
    "/api/conversations/{conversation_id:uuid}/truncate": {"POST": USER},
}
# Bodies that let an authorized call do its work; every other write sends {}.
BODIES = {
    "/v1/chat/completions": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    "/v1/completions": {"model": MODEL, "prompt": "hi"},
}
MEMBER_EMAIL = "member@example.test"
REFUSED = {401, 403}
SAFE = {"GET", "HEAD", "OPTIONS"}
ALL_METHODS = {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"}
# What a misspelt path may answer without the credentials its route needs.
NOT_SERVED = {401, 403, 404, 405}


@dataclass
class Caller:
    name: str
    headers: dict[str, str]
    csrf: str | None = None  # sent on writes


def declared_routes(app: Litestar) -> dict[str, set[str]]:
    """Every path the app serves, with the methods it declares (the API's raw handlers
    declare none: they answer 405 themselves, so the table's methods stand for them)."""
    routes: dict[str, set[str]] = {}
    for route in app.routes:
        if isinstance(route, HTTPRoute):
            routes[route.path] = set(route.methods) - {"OPTIONS", "HEAD"}
        elif isinstance(route, ASGIRoute):
            routes[route.path] = set(GUARDS.get(route.path, {}))
        else:
            raise AssertionError(f"a route of a kind this test does not know: {route!r}")
    for path in API_ROUTES:
        routes.setdefault(path, set(GUARDS.get(path, {})))
    return routes


def unstated(routes: dict[str, set[str]]) -> dict[str, set[str]]:
    """The routes (and methods) whose guard GUARDS does not state, or states for nothing."""
    paths = set(routes) | set(GUARDS)
    return {
        path: routes.get(path, set()) ^ set(GUARDS.get(path, {}))
        for path in paths
        if path not in routes or path not in GUARDS or routes[path] != set(GUARDS[path])
    }


def concrete(path: str) -> str:
    path = re.sub(r"\{[^}:]+:uuid\}", str(uuid.uuid4()), path)
    return re.sub(r"\{[^}:]+:int\}", "1", path)


def variants(path: str) -> list[str]:
    """Spellings of ``path`` a router or proxy may normalise differently from the guard."""
    first, _, rest = path[1:].partition("/")
    spellings = [
        "/" + path,  # // prefix
        f"/{first}//{rest}" if rest else path + "//",  # a doubled inner slash
        path + "/",  # a trailing slash
        path[: path.rfind("/")] + "%2F" + path[path.rfind("/") + 1 :] if rest else path,
        path.upper(),
        path + "%00",
        path.replace("/", "/./", 1),
    ]
    return [s for s in spellings if s != path]


def expected_refusal(guard: str, caller: str) -> int | None:
    """The status ``caller`` must get from a route with ``guard``; None: let through."""
    table = {
        PUBLIC: {},
        USER: {"anonymous": 401, "api key": 401},
        USER_OR_KEY: {"anonymous": 401},
        ADMIN: {"anonymous": 401, "api key": 401, "member": 403},
    }
    return table[guard].get(caller)


def session_of(client: TestClient, email: str, password: str, name: str = "") -> Caller:
    response = client.post("/auth/local/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    session = response.cookies[SESSION_COOKIE]
    client.cookies.clear()  # each call names its caller's cookie itself
    cookie = {"cookie": f"{SESSION_COOKIE}={session}"}
    return Caller(name or email, cookie, response.json()["csrf_token"])


def call(client: TestClient, caller: Caller, method: str, path: str) -> httpx.Response:
    headers = dict(caller.headers)
    if caller.csrf and method not in SAFE:
        headers[CSRF_HEADER] = caller.csrf
    body = BODIES.get(path, {}) if method in {"POST", "PATCH", "PUT"} else None
    # A raw URL: httpx would read a leading "//" as a host.
    url = httpx.URL("http://testserver").copy_with(raw_path=path.encode())
    client.cookies.clear()
    return client.request(method, url, headers=headers, json=body)


def built_ui(tmp_path: Path) -> str:
    """A built web app, so that its routes are there to check whether or not `make ui` ran."""
    build = tmp_path / "ui"
    (build / "_app" / "immutable").mkdir(parents=True, exist_ok=True)
    (build / "index.html").write_text("<!doctype html><title>app</title>")
    return str(build)


def test_every_route_has_its_guard_and_no_spelling_gets_around_it(
    tmp_path: Path, fake_worker: str
) -> None:
    # Users without a department are refused /v1; "ops" (made below) takes them in.
    gateway = embedded_gateway(
        tmp_path, workers=fake_worker, default_department="ops", ui_dir=built_ui(tmp_path)
    )
    member_password = asyncio.run(admin_tasks.create_admin(gateway.settings, MEMBER_EMAIL))
    app = create_app(gateway.settings)
    with TestClient(app=app, raise_server_exceptions=False) as client:
        missing = unstated(declared_routes(client.app))
        assert not missing, f"routes whose guard this test does not state: {missing}"
        public = {p for p, methods in GUARDS.items() if PUBLIC in methods.values()}
        assert public == PUBLIC_PATHS

        admin = session_of(client, ADMIN_EMAIL, gateway.admin_password, "admin")
        member = session_of(client, MEMBER_EMAIL, member_password, "member")
        writes = {"cookie": admin.headers["cookie"], CSRF_HEADER: admin.csrf or ""}
        users = client.get("/api/admin/users", headers=writes).json()["items"]
        member_id = next(u["id"] for u in users if u["email"] == MEMBER_EMAIL)
        demoted = client.patch(
            f"/api/admin/users/{member_id}", json={"role": "member"}, headers=writes
        )
        assert demoted.json()["role"] == "member", demoted.text
        ops = {"name": "Ops", "slug": "ops"}
        department = client.post("/api/admin/departments", json=ops, headers=writes).json()
        created = client.post(
            "/api/admin/keys", json={"department_id": department["id"], "name": "k"}, headers=writes
        )
        key = Caller("api key", {"authorization": f"Bearer {created.json()['key']}"})
        anonymous = Caller("anonymous", {})
        fresh = {
            "member": lambda: session_of(client, MEMBER_EMAIL, member_password, "member"),
            "admin": lambda: session_of(client, ADMIN_EMAIL, gateway.admin_password, "admin"),
        }

        for template, methods in sorted(GUARDS.items()):
            path = concrete(template)
            for method, guard in sorted(methods.items()):
                for caller in (anonymous, member, key, admin):
                    if template == "/auth/logout" and caller.csrf:
                        caller = fresh[caller.name]()  # signing out ends the session
                    refusal = expected_refusal(guard, caller.name)
                    if caller.csrf and guard != PUBLIC and refusal is None and method not in SAFE:
                        # The same session without its CSRF token: a write is refused.
                        bare = Caller(caller.name, caller.headers)
                        forged = call(client, bare, method, path)
                        assert forged.status_code == 403, (method, path, caller.name)
                    response = call(client, caller, method, path)
                    status = response.status_code
                    where = (method, path, caller.name, status, response.text[:200])
                    assert status < 500, where
                    if refusal is not None:
                        assert status == refusal, where
                    else:
                        assert status not in REFUSED, where
                if guard == PUBLIC:
                    continue
                # Without the credentials the route needs, no spelling of it is served.
                unentitled = [anonymous] + ([member, key] if guard == ADMIN else [])
                for spelling in variants(path):
                    for caller in unentitled:
                        response = call(client, caller, method, spelling)
                        where = (method, spelling, caller.name, response.text[:200])
                        assert response.status_code in NOT_SERVED, where
            if all(guard != PUBLIC for guard in methods.values()):
                # Methods the route does not have are not served either.
                for method in sorted(ALL_METHODS - set(methods)):
                    response = call(client, anonymous, method, path)
                    assert response.status_code in NOT_SERVED, (method, path, response.text)
            # OPTIONS: Litestar answers it with no data (behind a controller's guards).
            options = call(client, anonymous, "OPTIONS", path)
            assert options.status_code in (204, 401, 405), options.text
            assert options.status_code != 204 or not options.content

        # Each kind of caller really did get through where it should: the proxy reached
        # the worker, and the admin's listing is real data.
        chat = call(client, key, "POST", "/v1/chat/completions")
        assert chat.status_code == 200 and chat.json()["choices"], chat.text
        listed = call(client, admin, "GET", "/api/admin/keys")
        assert [k["name"] for k in listed.json()["items"]] == ["k"]


def test_a_route_missing_from_the_table_fails_the_check(tmp_path: Path) -> None:
    @get("/api/admin/new-thing", sync_to_thread=False)
    def new_thing() -> None: ...

    @post("/api/me", sync_to_thread=False)
    def new_method() -> None: ...

    gateway = embedded_gateway(tmp_path, ui_dir=built_ui(tmp_path))
    app = create_app(gateway.settings, [new_thing, new_method])
    assert unstated(declared_routes(app)) == {
        "/api/admin/new-thing": {"GET"},
        "/api/me": {"POST"},
    }
    assert unstated(declared_routes(create_app(gateway.settings))) == {}
