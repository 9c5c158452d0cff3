"""The documentation: the generated configuration reference is current, every setting and
worker option is described, and every relative link in README.md and docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.config_reference import REFERENCE_PATH, REGENERATE, render, undocumented
from gateway.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_configuration_reference_is_current() -> None:
    committed = (ROOT / REFERENCE_PATH).read_text(encoding="utf-8")
    assert committed == render(), (
        f"{REFERENCE_PATH} is stale: run `{REGENERATE}` "
        f"(or `enclave config-reference > {REFERENCE_PATH}`) and commit it"
    )


def test_every_setting_and_worker_option_is_described() -> None:
    assert undocumented() == [], (
        "write a comment above these fields in gateway/settings.py, or a help= on these"
        " options in inference/server/cli.py, then run `make docs`"
    )


def test_the_reference_names_every_setting_with_its_default() -> None:
    page = render()
    assert "| `ENCLAVE_PORT` | integer | `8000` |" in page
    assert "| `ENCLAVE_SECRET_KEY` (or `ENCLAVE_SECRET_KEY_FILE`) | string | (empty) |" in page
    assert "| `ENCLAVE_MODE` | one of `embedded`, `production` | `embedded` |" in page
    assert "| `--model` | string | (required) |" in page
    assert "| `--no-enable-prefix-caching` | flag | off |" in page
    for name in Settings.__dataclass_fields__:
        assert f"`ENCLAVE_{name.upper()}`" in page


def _prose(page: Path) -> str:
    return re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.*)$", _prose(page), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page)):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        linked = (page.parent / path) if path else page
        if not linked.exists() or (
            anchor and linked.suffix == ".md" and anchor not in _anchors(linked)
        ):
            broken.append(target)
    assert broken == [], f"{page.relative_to(ROOT)} links to files or headings that do not exist"


def test_enclave_config_reference_prints_the_page(capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.cli import main

    assert main(["config-reference"]) == 0
    assert capsys.readouterr().out == render()
