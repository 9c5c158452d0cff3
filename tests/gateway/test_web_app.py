"""The gateway serves the built web app: index.html for the app's paths, JSON 404s for its
own, a year's cache on hashed files, and a Content-Security-Policy computed from the build."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

from litestar.testing import TestClient

from gateway.app import create_app
from gateway.settings import Settings
from gateway.web_app import content_security_policy

BOOT = "\n\t\t\t\tstart();\n\t\t\t"
INDEX = f"<!doctype html><html><body><div id=app><script>{BOOT}</script></div></body></html>"
ANNOUNCER = "position: absolute; left: 0"


def _build(root: Path) -> Path:
    (root / "_app" / "immutable" / "entry").mkdir(parents=True)
    (root / "index.html").write_text(INDEX)
    (root / "favicon.svg").write_text("<svg/>")
    (root / ".secret").write_text("not for anyone")
    entry = root / "_app" / "immutable" / "entry" / "app.abc123.js"
    entry.write_text(f'const t = `<div id="a" style="{ANNOUNCER}"></div><p style="${{x}}"></p>`;')
    return root


def _sha(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_app_paths_get_the_page_and_gateway_paths_stay_json(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", ui_dir=str(_build(tmp_path / "build")))
    with TestClient(app=create_app(settings)) as client:
        for path in ("/", "/c/5d7f", "/signin", "/admin/users/x"):
            page = client.get(path)
            assert page.status_code == 200 and page.text == INDEX, path
            assert page.headers["content-type"].startswith("text/html")
            assert page.headers["cache-control"] == "no-cache"
            assert page.headers["x-frame-options"] == "DENY"
        spellings = ("/API/nope", "/api//nope", "/%61pi/nope", "/V1")
        for path in ("/api/nope", "/v1/nope", "/auth/nope", "/_app/x.js", *spellings):
            missing = client.get(path)
            assert missing.status_code == 404, path
            assert missing.headers["content-type"] == "application/json", path
        # (Litestar's document controller answers its own unknown paths with its own page.)
        assert client.get("/schema/nope").status_code == 404
        assert client.post("/c/5d7f").status_code in (404, 405)  # only reads get the page
        asset = client.get("/_app/immutable/entry/app.abc123.js")
        assert asset.status_code == 200
        assert "immutable" in asset.headers["cache-control"]
        assert "max-age=31536000" in asset.headers["cache-control"]
        assert client.get("/favicon.svg").text == "<svg/>"
        assert client.get("/.secret").text == INDEX  # dot-files are never served


def test_the_policy_allows_the_builds_own_inline_code_by_hash_only(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", ui_dir=str(_build(tmp_path / "build")))
    with TestClient(app=create_app(settings)) as client:
        policy = client.get("/").headers["content-security-policy"]
    directives = dict(d.split(" ", 1) for d in policy.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == f"'self' {_sha(BOOT)}"
    assert directives["style-src"] == f"'self' 'unsafe-hashes' {_sha(ANNOUNCER)}"
    assert directives["img-src"] == "'self' data:"  # no remote image can carry data out
    assert directives["connect-src"] == "'self'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert content_security_policy("<p>no scripts</p>").startswith(
        "default-src 'none'; script-src 'self'; style-src 'self';"
    )


def test_without_a_build_the_root_says_how_to_make_one(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", ui_dir=str(tmp_path / "nothing-here"))
    with TestClient(app=create_app(settings)) as client:
        root = client.get("/")
        assert root.status_code == 404 and "make ui" in root.text
        assert client.get("/health").status_code == 200
