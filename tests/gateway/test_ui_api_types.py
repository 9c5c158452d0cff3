"""The web app's API types are generated from the gateway's OpenAPI document: a gateway
change that alters the API must come with `make ui-api`, so that the app's type check (not
a user's session) is what finds the break."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gateway.openapi import document_json

UI = Path(__file__).resolve().parents[2] / "admin-ui"
GENERATOR = UI / "node_modules" / ".bin" / "openapi-typescript"
CHECKED_IN = UI / "src" / "lib" / "api" / "schema.d.ts"


def test_the_checked_in_types_match_the_document(tmp_path: Path) -> None:
    if not GENERATOR.exists():
        pytest.fail("admin-ui's packages are not installed: run the suite with `make test`")
    document = tmp_path / "openapi.json"
    document.write_bytes(document_json())
    assert json.loads(document.read_bytes())["paths"]["/api/conversations"]
    generated = tmp_path / "schema.d.ts"
    subprocess.run(
        [str(GENERATOR), str(document), "-o", str(generated)],
        cwd=UI,
        check=True,
        capture_output=True,
        timeout=120,
    )
    assert generated.read_text() == CHECKED_IN.read_text(), (
        "admin-ui/src/lib/api/schema.d.ts is stale: run `make ui-api` and commit the result"
    )


def test_the_cli_prints_the_same_document(tmp_path: Path) -> None:
    printed = subprocess.run(
        ["enclave", "openapi"], capture_output=True, check=True, timeout=120, env=_env(tmp_path)
    ).stdout
    assert printed == document_json()


def _env(tmp_path: Path) -> dict[str, str]:
    import os
    import sys

    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
    }
