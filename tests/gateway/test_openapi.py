"""GET /schema/openapi.json: every route the gateway serves, who may call it, read freely."""

from __future__ import annotations

import re
from pathlib import Path

from litestar.routes import HTTPRoute
from litestar.testing import TestClient

from gateway.app import PUBLIC_PATHS, create_app
from gateway.domain.departments.schemas import SLUG_PATTERN
from gateway.domain.identity.principal import CSRF_HEADER as CSRF
from gateway.domain.proxy.handlers import API_ROUTES
from gateway.openapi import DOCUMENT_ROUTES
from gateway.web_app import ASSETS_ROUTE
from tests.gateway.helpers import ADMIN_EMAIL, embedded_gateway, sign_in


def test_the_document_describes_every_route_and_its_guard(tmp_path: Path) -> None:
    gateway = embedded_gateway(tmp_path)
    with TestClient(app=create_app(gateway.settings)) as client:
        reply = client.get("/schema/openapi.json")  # no session, no key
        assert reply.status_code == 200 and reply.headers["content-type"] == "application/json"
        document = reply.json()
        assert client.get("/schema").json() == document
        assert client.get("/schema/nothing").status_code == 404
        routes = {
            re.sub(r":[a-z]+\}", "}", route.path): set(route.methods) - {"OPTIONS", "HEAD"}
            for route in client.app.routes
            if isinstance(route, HTTPRoute)
            and route.path not in DOCUMENT_ROUTES
            and route.path != ASSETS_ROUTE  # the web app's files, not API
        }
    routes |= {"/v1/chat/completions": {"POST"}, "/v1/completions": {"POST"}}
    routes["/v1/models"] = {"GET"}
    assert set(API_ROUTES) <= set(routes)
    described = {path: {m.upper() for m in ops} for path, ops in document["paths"].items()}
    assert described == routes
    assert document["openapi"].startswith("3.1")
    schemes = document["components"]["securitySchemes"]
    assert schemes["apiKey"] == {**schemes["apiKey"], "type": "http", "scheme": "bearer"}
    assert (schemes["session"]["in"], schemes["csrf"]["in"]) == ("cookie", "header")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            where = (method, path)
            if path in PUBLIC_PATHS:
                assert operation["security"] == [], where
                continue
            assert operation["security"], where
            assert "401" in operation["responses"], where
            if path.startswith("/api/admin/"):
                # A session only, and its CSRF token on writes.
                want = {"session"} | ({"csrf"} if method != "get" else set())
                assert [set(s) for s in operation["security"]] == [want], where
            if path.startswith("/v1/"):
                assert {"apiKey"} in [set(s) for s in operation["security"]], where
    # The web UI's reads: a session or a key, and a named response type for its client.
    for path, struct in (("/api/me/usage", "UsageRead"), ("/api/status", "StatusRead")):
        operation = document["paths"][path]["get"]
        assert [set(s) for s in operation["security"]] == [{"apiKey"}, {"session"}], path
        schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{struct}"}, path
    assert "503" in document["paths"]["/api/me/usage"]["get"]["responses"]
    # The admin console's usage view: named types for its client, and the CSV as text/csv.
    for path, struct in (
        ("/api/admin/usage/daily", "DailyUsage"),
        ("/api/admin/usage/top", "TopUsage"),
        ("/api/admin/usage/refusals", "RefusalCounts"),
    ):
        operation = document["paths"][path]["get"]
        schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{struct}"}, path
        assert {"since", "until", "department_id"} <= {p["name"] for p in operation["parameters"]}
    rows = document["components"]["schemas"]["DailyRow"]["properties"]
    assert rows["via"]["enum"] == ["ui", "api"] and rows["day"]["format"] == "date"
    export = document["paths"]["/api/admin/usage/export.csv"]["get"]["responses"]["200"]
    assert "text/csv" in export["content"]
    states = document["components"]["schemas"]["ModelStatus"]["properties"]["state"]["enum"]
    assert states == ["ready", "loading", "unavailable"]
    chat = document["paths"]["/v1/chat/completions"]["post"]["requestBody"]
    assert chat["content"]["application/json"]["schema"]["$ref"].endswith("/ChatCompletionRequest")
    n = document["components"]["schemas"]["ChatCompletionRequest"]["properties"]["n"]
    assert {"minimum": 1, "maximum": 128} in [
        {k: v for k, v in option.items() if k in ("minimum", "maximum")} for option in n["anyOf"]
    ]


def test_the_admin_bodies_say_what_the_services_refuse(tmp_path: Path) -> None:
    # The services' own checks, now in the structs too: the document states them, and a
    # body breaking one is a 400 naming the field (before, schema-valid bodies failed).
    gateway = embedded_gateway(tmp_path)
    with TestClient(app=create_app(gateway.settings)) as client:
        schemas = client.get("/schema/openapi.json").json()["components"]["schemas"]
        csrf = sign_in(client, ADMIN_EMAIL, gateway.admin_password)
        department = schemas["DepartmentCreate"]["properties"]
        assert department["slug"]["pattern"] == SLUG_PATTERN
        weight = department["scheduling_weight"]
        assert (weight["minimum"], weight["maximum"]) == (1, 1000)
        assert department["requests_per_minute"]["minimum"] == 1  # Litestar's oneOf form
        grace = schemas["KeyRotate"]["properties"]["grace_seconds"]
        assert (grace["minimum"], grace["maximum"]) == (0, 30 * 86400)
        refused = {
            "slug": {"name": "Ops", "slug": "Not A Slug"},
            "name": {"name": "   ", "slug": "ops"},
            "scheduling_weight": {"name": "Ops", "slug": "ops", "scheduling_weight": 0},
            "requests_per_minute": {"name": "Ops", "slug": "ops", "requests_per_minute": 0},
        }
        for field, body in refused.items():
            reply = client.post("/api/admin/departments", json=body, headers={CSRF: csrf})
            assert reply.status_code == 400 and field in reply.json()["detail"], reply.text
