"""The web app (`admin-ui/`, built to static files) served by the gateway.

Every path that is not the gateway's own (its API, sign-in, the OpenAI API, documents,
health and metrics) gets the app's index.html: the app routes in the browser. Hashed
build output under `/_app/immutable/` is cached for a year; index.html is revalidated on
every load, so a new build reaches users at once.

The app gets a strict Content-Security-Policy: scripts only from the gateway (the one
inline bootstrap script SvelteKit writes is allowed by its hash, computed here from the
file actually served), no inline styles but the exact style attributes the build's own
templates carry (SvelteKit's screen-reader announcer has one; each is allowed by its hash,
found in the built files, with 'unsafe-hashes'), no connections or images elsewhere. So a model's
answer, even one a prompt injection wrote, cannot load a remote image to carry data out
or run script: the markdown is sanitized, and the policy would block it anyway.
"""

from __future__ import annotations

import base64
import hashlib
import mimetypes
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from litestar import Request, Response, Router
from litestar.datastructures import CacheControlHeader
from litestar.enums import MediaType
from litestar.exceptions import NotFoundException
from litestar.static_files import create_static_files_router

# Paths the gateway answers itself: an unknown one there is a JSON 404, never the app.
GATEWAY_PREFIXES = ("/api/", "/auth/", "/v1/", "/schema/", "/_app/")
GATEWAY_PATHS = frozenset({"/api", "/auth", "/v1", "/schema", "/health", "/metrics", "/_app"})
YEAR_S = 365 * 24 * 3600
# The hashed build files' route (public: they are the same for everyone).
ASSETS_ROUTE = "/_app/immutable/{file_path:path}"
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
# A static style attribute in a compiled template: style="..." with nothing interpolated.
_STYLE_ATTRIBUTE = re.compile(r'style="([^"<>${}]*)"')


def default_root() -> Path:
    """admin-ui/build beside the gateway package: where `make ui` builds it."""
    return Path(__file__).resolve().parents[1] / "admin-ui" / "build"


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def template_styles(root: Path) -> tuple[str, ...]:
    """The static style attributes in the built scripts, each once, sorted."""
    found: set[str] = set()
    for script in (root / "_app" / "immutable").rglob("*.js"):
        found.update(_STYLE_ATTRIBUTE.findall(script.read_text(errors="replace")))
    return tuple(sorted(found))


def content_security_policy(index_html: str, styles: tuple[str, ...] = ()) -> str:
    scripts = " ".join(_hash(body) for body in _INLINE_SCRIPT.findall(index_html))
    style_hashes = " ".join(_hash(style) for style in styles)
    style_src = f"style-src 'self' 'unsafe-hashes' {style_hashes}" if styles else "style-src 'self'"
    return "; ".join(
        (
            "default-src 'none'",
            f"script-src 'self' {scripts}".strip(),
            style_src,
            "img-src 'self' data:",
            "font-src 'self'",
            "connect-src 'self'",
            "manifest-src 'self'",
            "base-uri 'none'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        )
    )


@dataclass(frozen=True, slots=True)
class WebApp:
    root: Path
    index: bytes
    headers: dict[str, str]

    @classmethod
    def load(cls, root: Path) -> WebApp | None:
        """The built app at ``root``; None when it is not built."""
        try:
            index = (root / "index.html").read_bytes()
        except OSError:
            return None
        headers = {
            "content-security-policy": content_security_policy(
                index.decode(), template_styles(root)
            ),
            "cache-control": "no-cache",
            "x-content-type-options": "nosniff",
            "x-frame-options": "DENY",
            "referrer-policy": "same-origin",
        }
        return cls(root, index, headers)

    def routes(self) -> list[Router]:
        """The hashed assets' route (the files beside index.html go through app_page)."""
        assets = create_static_files_router(
            path="/_app/immutable",
            directories=[self.root / "_app" / "immutable"],
            cache_control=CacheControlHeader(max_age=YEAR_S, public=True, immutable=True),
            include_in_schema=False,
            name="web-assets",
        )
        return [assets]

    def top_level_file(self, path: str) -> Path | None:
        """A file such as /favicon.svg: one name, directly in the build's root."""
        name = path.removeprefix("/")
        if not name or "/" in name or name.startswith(".") or name == "index.html":
            return None
        candidate = self.root / name
        return candidate if candidate.is_file() else None


def is_gateway_path(path: str) -> bool:
    """Whether ``path``, however spelled (case, percent-encoding, repeated or dot
    segments), names one of the gateway's own: those never get the app's page."""
    plain = unquote(path).lower()
    plain = re.sub(r"/(\./)+", "/", re.sub(r"/{2,}", "/", plain))
    return plain.rstrip("/") in GATEWAY_PATHS or plain.startswith(GATEWAY_PREFIXES)


def app_page(request: Request[Any, Any, Any], _: NotFoundException) -> Response[Any] | None:
    """What a GET of a path no route matched answers when it is the app's: index.html (or
    a file of the build's root); None leaves it a JSON 404."""
    web: WebApp | None = getattr(request.app.state, "web", None)
    path = request.url.path
    if request.method not in ("GET", "HEAD") or is_gateway_path(path):
        return None
    if web is None:
        return Response(
            "The web app is not built here: run `make ui` (or `make run`), then reload.\n",
            status_code=404,
            media_type="text/plain",
        )
    file = web.top_level_file(path)
    if file is not None:
        return Response(
            file.read_bytes(),
            media_type=mimetypes.guess_type(file.name)[0] or "application/octet-stream",
            headers={"cache-control": "no-cache", "x-content-type-options": "nosniff"},
        )
    return Response(web.index, media_type=MediaType.HTML, headers=web.headers)
