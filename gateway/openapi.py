"""GET /schema/openapi.json: the gateway's whole API as one OpenAPI 3.1 document.

Litestar describes its own routes (the admin API, sign-in, /api/me, /health). The OpenAI
API's handlers are raw ASGI served ahead of the router (`domain/proxy/entry.py`), which
leaves Litestar nothing to describe, so their paths are added here from the gateway's
own request structs (`domain/proxy/schemas.py`): what the gateway checks, never the
worker's package, which the gateway only talks to over HTTP. Added here too: who may call
each route (the security schemes) and the errors the guards answer with. The document
holds no secrets and is read without credentials, like OpenAI's published one.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request
from litestar.enums import MediaType
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin

from gateway import __version__
from gateway.domain.identity.principal import CSRF_HEADER, SESSION_COOKIE
from gateway.domain.proxy.schemas import ChatCompletionRequest, CompletionRequest

DOCUMENT_ROOT = "/schema"
_REF = "#/components/schemas/{name}"
SECURITY_SCHEMES = {
    "apiKey": {"type": "http", "scheme": "bearer", "description": "A gateway key, sk-enc-..."},
    "session": {"type": "apiKey", "in": "cookie", "name": SESSION_COOKIE},
    "csrf": {
        "type": "apiKey",
        "in": "header",
        "name": CSRF_HEADER,
        "description": "The session's CSRF token (from sign-in or /api/me); every write sends it",
    },
}
_OPENAI_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "null"]},
            },
        }
    },
}
_LITESTAR_ERROR = {
    "type": "object",
    "required": ["status_code", "detail"],
    "properties": {
        "status_code": {"type": "integer"},
        "detail": {"type": "string"},
        "extra": {},
    },
}


# The routes Litestar adds for the document: the document itself, under both spellings,
# and a 404 for any other path below DOCUMENT_ROOT.
DOCUMENT_ROUTES = frozenset(
    {DOCUMENT_ROOT, f"{DOCUMENT_ROOT}/openapi.json", DOCUMENT_ROOT + "/{path:str}"}
)


def openapi_config(public_paths: frozenset[str]) -> OpenAPIConfig:
    return OpenAPIConfig(
        title="Enclave gateway",
        version=__version__,
        path=DOCUMENT_ROOT,
        render_plugins=[GatewayDocument(public_paths)],
        create_examples=False,
    )


class GatewayDocument(JsonRenderPlugin):
    """Litestar's document of its routes, completed with the OpenAI API's paths."""

    def __init__(self, public_paths: frozenset[str]) -> None:
        super().__init__(path="/openapi.json", media_type=MediaType.JSON)
        self.public_paths = public_paths
        self._rendered: bytes | None = None

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:  # the routes are fixed once the app is built
            self._rendered = msgspec.json.encode(complete(openapi_schema, self.public_paths))
        return self._rendered


_METHODS = {"get", "post", "put", "patch", "delete"}
_SESSION: dict[str, list[str]] = {"session": []}
_SESSION_WRITE: dict[str, list[str]] = {"session": [], "csrf": []}
_KEY: dict[str, list[str]] = {"apiKey": []}
# The Litestar routes a key may call too (the rest take a session only).
_KEY_OR_SESSION = frozenset({"/api/me", "/api/me/usage", "/api/status"})


def complete(litestar_document: dict[str, Any], public_paths: frozenset[str]) -> dict[str, Any]:
    document = msgspec.json.decode(msgspec.json.encode(litestar_document))  # a copy
    components = document.setdefault("components", {})
    _, structs = msgspec.json.schema_components(
        [ChatCompletionRequest, CompletionRequest], ref_template=_REF
    )
    components.setdefault("schemas", {}).update(
        structs, OpenAIError=_OPENAI_ERROR, GatewayError=_LITESTAR_ERROR
    )
    components["securitySchemes"] = SECURITY_SCHEMES
    paths = document.setdefault("paths", {})
    for path, operations in paths.items():
        for method, operation in operations.items():
            if method in _METHODS:
                _describe(path, method, operation, path in public_paths)
    paths.update(_api_paths())
    return document


# Answers Litestar cannot see: what a route's guard, its service and the app's exception
# handlers (gateway/errors.py) refuse with, and the sign-in routes' redirects.
_SIGN_IN = {
    "/auth/local/login": {
        "401": "Wrong email or password",
        "415": "The body is not application/json",
        "429": "Too many failed sign-ins for this account or address (Retry-After)",
    },
    "/auth/login": {"302": "To the IdP", "404": "Single sign-on is not configured"},
    "/auth/callback": {
        "302": "Signed in: to the app",
        "401": "The IdP's answer did not check out",
        "404": "Single sign-on is not configured",
    },
}


VERIFY_PATH = "/api/admin/audit/verify"
# Admin writes whose 409 is not a name taken.
_CONFLICTS = {
    "/api/admin/workers/{index}/drain": "A worker the gateway does not run (configured by URL)",
    "/api/admin/workers/{index}/restart": (
        "A worker the gateway does not run (configured by URL), or one already restarting"
    ),
}

# Other answers of single routes, beyond what their guard and kind give them.
_MORE: dict[tuple[str, str], dict[str, str]] = {
    ("post", "/api/admin/assistants/tokens"): {
        "503": "No worker is up (serving the model) to count the tokens"
    },
    ("post", "/api/admin/assistants/extract"): {"413": "The upload is larger than 10 MiB"},
    ("post", "/api/conversations"): {"404": "No assistant the caller may use with that id"},
}


def _describe(path: str, method: str, operation: dict[str, Any], public: bool) -> None:
    """Who may call a Litestar route, and what it answers that Litestar does not list."""
    responses = operation.setdefault("responses", {})
    if public:
        operation["security"] = []
        errors = dict(_SIGN_IN.get(path, {}))
        if "302" in errors:  # Litestar lists a redirect as a 200
            responses.pop("200", None)
            responses["302"] = {"description": errors.pop("302")}
    else:
        write = method != "get"
        session = _SESSION_WRITE if write else _SESSION
        # /api/me and the UI's reads take a key too; the admin API and sign-out, a session.
        operation["security"] = [_KEY, _SESSION] if path in _KEY_OR_SESSION else [session]
        errors = {"401": "No session or key, or one that is not valid (any more)"}
        if write or path.startswith("/api/admin/"):
            errors["403"] = "Not an admin, or a write without the session's CSRF token"
        if path.startswith("/api/admin/") and (write or "{" in path):
            errors["404"] = "No such record, or no record the body names (a department)"
        elif "{" in path:  # the caller's own records only: another's is not found either
            errors["404"] = "No such record of the caller's"
        if path.startswith("/api/admin/") and write:
            errors["409"] = _CONFLICTS.get(path, "A name or slug already taken")
        if path == "/api/me/usage":
            errors["503"] = "The limits store (Redis) cannot be reached"
        if path == VERIFY_PATH:  # it names no record and takes no body
            errors = {k: v for k, v in errors.items() if k not in ("404", "409")}
            errors["503"] = "The audit head log could not be read"
        errors |= _MORE.get((method, path), {})
    for status, description in errors.items():
        responses.setdefault(status, _error(description, "GatewayError"))


def _error(description: str, schema: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": _REF.format(name=schema)}}},
    }


def _api_paths() -> dict[str, Any]:
    """The OpenAI API: a gateway key, or a signed-in user's session (and CSRF token on
    writes); a user must be in a department."""
    return {
        "/v1/chat/completions": {"post": _completion("ChatCompletionRequest")},
        "/v1/completions": {"post": _completion("CompletionRequest")},
        "/v1/models": {
            "get": {
                "summary": "The models this caller may use",
                "security": [_KEY, _SESSION],
                "responses": {
                    "200": {
                        "description": "OK",
                        "content": {"application/json": {"schema": _MODEL_LIST}},
                    },
                    **_api_errors(write=False),
                },
            }
        },
    }


_MODEL_LIST = {
    "type": "object",
    "required": ["object", "data"],
    "properties": {
        "object": {"const": "list"},
        "data": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "object", "created", "owned_by"],
                "properties": {
                    "id": {"type": "string"},
                    "object": {"const": "model"},
                    "created": {"type": "integer"},
                    "owned_by": {"type": "string"},
                },
            },
        },
    },
}


def _completion(request: str) -> dict[str, Any]:
    body = {"application/json": {"schema": {"$ref": _REF.format(name=request)}}}
    return {
        "summary": "Forwarded to a worker serving the model (the worker checks the rest)",
        "security": [_KEY, _SESSION_WRITE],
        "requestBody": {"required": True, "content": body},
        "responses": {
            "200": {
                "description": "The worker's answer; with stream, server-sent events",
                "content": {
                    "application/json": {"schema": {"type": "object"}},
                    "text/event-stream": {"schema": SSE_EVENT},
                },
            },
            **_api_errors(write=True),
        },
    }


# One server-sent event (OpenAPI 3.1 describes a stream by its events): a chunk as JSON
# in `data`, an error event's OpenAI error body, and "[DONE]" last.
SSE_EVENT = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
}


def _api_errors(*, write: bool) -> dict[str, Any]:
    errors = {
        "401": "No valid key or session",
        "403": "No department, a model not allowed, or a session write without its CSRF token",
    }
    if write:
        errors |= {
            "400": "A parameter to fix; `param` names it",
            "404": "No worker serves this model",
            "413": "The body is larger than ENCLAVE_API_BODY_MAX_BYTES",
            "429": "A limit of the key or department (Retry-After, X-RateLimit-*)",
            "502": "The worker failed or answered badly",
            "503": "No healthy worker, or the limiter or database is unavailable (Retry-After)",
            "504": "The worker took too long",
        }
    return {status: _error(text, "OpenAIError") for status, text in errors.items()}


def document_json() -> bytes:
    """The document as `/schema/openapi.json` serves it, without starting a gateway: what
    `enclave openapi` prints and the web app's typed client is generated from."""
    import tempfile
    from pathlib import Path

    from gateway.app import PUBLIC_PATHS, create_app
    from gateway.settings import Settings

    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(Settings(data_dir=Path(data_dir)))
        document = complete(app.openapi_schema.to_schema(), PUBLIC_PATHS)
    return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"
