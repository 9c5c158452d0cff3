"""POST /api/admin/assistants/extract: the text of a .txt, .md or .pdf upload; anything
else a 400 that says what is wrong with the file."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from gateway.domain.assistants.extract import MAX_UPLOAD_BYTES, extract_text
from gateway.domain.identity.principal import CSRF_HEADER, SESSION_COOKIE
from tests.gateway.assistants.conftest import Office
from tests.gateway.assistants.pdfs import blank_pdf, encrypted_pdf, text_pdf

PATH = "/api/admin/assistants/extract"


def upload(office: Office, files: Any, csrf: bool = True) -> httpx.Response:
    admin = office.admin
    headers = {"cookie": f"{SESSION_COOKIE}={admin.session}"}
    if csrf:
        headers[CSRF_HEADER] = admin.csrf
    admin.client.cookies.clear()
    return admin.client.post(PATH, files=files, headers=headers)


def test_text_markdown_and_pdf(sqlite_office: Office) -> None:
    office = sqlite_office
    text = "Étape 1: décrire le problème.\r\nStep 2: contain it.\n"
    reply = upload(office, {"file": ("8d.txt", text.encode("utf-8-sig"), "text/plain")})
    assert reply.status_code == 200, reply.text
    assert reply.json() == {
        "text": "Étape 1: décrire le problème.\nStep 2: contain it.",
        "filename": "8d.txt",
        "characters": 49,
    }
    markdown = upload(office, {"file": ("notes.MD", b"# Heading\n\n- item\n", "text/markdown")})
    assert markdown.json()["text"] == "# Heading\n\n- item"
    pdf = text_pdf("Eight disciplines (8D) report.", "Second page: root cause.")
    read = upload(office, {"file": ("../../etc/report.pdf", pdf, "application/pdf")})
    assert read.status_code == 200, read.text
    body = read.json()
    assert body["filename"] == "report.pdf"
    assert "Eight disciplines (8D) report." in body["text"] and "root cause" in body["text"]
    assert body["text"].index("Eight") < body["text"].index("Second")
    assert body["characters"] == len(body["text"])


def test_bad_files_are_400s(sqlite_office: Office) -> None:
    office = sqlite_office
    for name, content, said in (
        ("empty.txt", b"", "empty"),
        ("blank.txt", b"  \n\t ", "no text"),
        ("latin1.txt", "café".encode("latin-1"), "UTF-8"),
        ("binary.md", b"ab\x00cd", "NUL"),
        ("image.png", b"\x89PNG\r\n", "only .txt, .md and .pdf"),
        ("noext", b"hello", "only .txt"),
        ("fake.pdf", b"hello, not a PDF", "not a PDF"),
        ("broken.pdf", b"%PDF-1.4\n1 0 obj <<", "could not be read"),
        ("cut.pdf", text_pdf("half of it")[:60], "could not be read"),
        ("scan.pdf", blank_pdf(), "no text"),
        ("locked.pdf", encrypted_pdf(), "encrypted"),
        ("pdf.txt", text_pdf("x"), "is a PDF"),
        ("huge.txt", b"a" * (256 * 1024 + 1), "at most"),
    ):
        reply = upload(office, {"file": (name, content, "application/octet-stream")})
        assert reply.status_code == 400, (name, reply.text)
        assert said in reply.json()["detail"], (name, reply.text)


def test_the_upload_must_be_one_file_field(sqlite_office: Office) -> None:
    office = sqlite_office
    assert upload(office, {"other": ("a.txt", b"hello", "text/plain")}).status_code == 400
    assert upload(office, {"file": (None, b"hello")}).status_code == 400
    json_body = office.admin.call("POST", PATH, {"file": "hello"})
    assert json_body.status_code == 400, json_body.text
    # A session's upload needs its CSRF token like any other write.
    assert upload(office, {"file": ("a.txt", b"hi")}, csrf=False).status_code == 403
    too_big = upload(office, {"file": ("big.txt", b"a" * (MAX_UPLOAD_BYTES + 100 * 1024))})
    assert too_big.status_code == 413, too_big.text


@pytest.mark.parametrize("suffix", [".txt", ".md", ".pdf"])
def test_extract_refuses_files_past_the_limit(suffix: str) -> None:
    with pytest.raises(ValueError, match="larger than 10 MiB"):
        extract_text(f"big{suffix}", b"a" * (MAX_UPLOAD_BYTES + 1))
