"""The text of a file an admin uploads to write an assistant's prompt from: .txt, .md, .pdf.

Plain text must be UTF-8; a PDF's text is read by pypdf, page by page. A file that is not
what its name says, is empty, holds no text or more text than a system prompt may hold is
refused with a ValueError that says so (a 400). Runs in a thread: a large PDF takes a
while to read.
"""

from __future__ import annotations

import io
import logging
from pathlib import PurePosixPath

from gateway.domain.assistants.schemas import MAX_PROMPT_CHARS, ExtractedText

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
TEXT_SUFFIXES = frozenset({".txt", ".md", ".markdown"})
PDF_SUFFIX = ".pdf"
MAX_FILENAME_CHARS = 255


def extract_text(filename: str, data: bytes) -> ExtractedText:
    name = _clean_name(filename)
    suffix = PurePosixPath(name.lower()).suffix
    if suffix not in TEXT_SUFFIXES and suffix != PDF_SUFFIX:
        raise ValueError(f"{name!r}: only .txt, .md and .pdf files are read")
    if not data:
        raise ValueError(f"{name!r} is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise ValueError(f"{name!r} is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MiB")
    text = _pdf_text(name, data) if suffix == PDF_SUFFIX else _plain_text(name, data)
    text = text.replace("\r\n", "\n").strip()
    if not text:
        raise ValueError(
            f"{name!r} holds no text" + (" (only images?)" if suffix == ".pdf" else "")
        )
    if len(text) > MAX_PROMPT_CHARS:
        raise ValueError(
            f"{name!r} holds {len(text)} characters of text; a system prompt holds at most"
            f" {MAX_PROMPT_CHARS}"
        )
    return ExtractedText(text=text, filename=name, characters=len(text))


def _clean_name(filename: str) -> str:
    """The file's own name: no folders, no NUL or control characters, not too long."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    base = "".join(c for c in base if c.isprintable())
    return base[:MAX_FILENAME_CHARS] or "upload"


def _plain_text(name: str, data: bytes) -> str:
    if data.startswith(b"%PDF-"):
        raise ValueError(f"{name!r} is a PDF, not text: name it .pdf")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{name!r} is not UTF-8 text") from None
    if "\x00" in text:
        raise ValueError(f"{name!r} is not text (it holds NUL characters)")
    return text


def _pdf_text(name: str, data: bytes) -> str:
    from pypdf import PdfReader  # only when a PDF comes: it is not small to import

    if not data.lstrip()[:5] == b"%PDF-":
        raise ValueError(f"{name!r} is not a PDF (it does not start with %PDF-)")
    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its warnings on odd files are noise
    try:
        reader = PdfReader(io.BytesIO(data))
        encrypted = reader.is_encrypted
    except Exception as exc:  # pypdf raises many kinds on a damaged file
        raise _unreadable(name, exc) from None
    if encrypted:
        raise ValueError(f"{name!r} is encrypted; upload a copy without a password")
    pages: list[str] = []
    size = 0
    try:
        for page in reader.pages:
            text = page.extract_text() or ""
            pages.append(text)
            size += len(text)
            if size > MAX_PROMPT_CHARS * 2:  # past any prompt already: stop reading
                break
    except Exception as exc:
        raise _unreadable(name, exc) from None
    return "\n\n".join(p.strip() for p in pages if p.strip()).replace("\x00", "")


def _unreadable(name: str, exc: Exception) -> ValueError:
    return ValueError(f"{name!r} could not be read as a PDF ({type(exc).__name__})")
