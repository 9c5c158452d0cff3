"""Assistant slugs: what requests name an assistant by (``"model": "<slug>"``).

A slug is unique across every department, forever (an archived assistant keeps its own),
and is never a model's name: the proxy could not tell the two apart. One made from the
name takes the next free ``-2``, ``-3``, ... suffix; one the admin chose is refused (409)
when taken.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Collection

from litestar.exceptions import ClientException
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from gateway.db.models import Assistant
from gateway.domain.assistants.schemas import SLUG_PATTERN

MAX_SLUG_CHARS = 63
FALLBACK = "assistant"


def conflict(message: str) -> ClientException:
    return ClientException(status_code=409, detail=message)


def from_name(name: str) -> str:
    """``"Qualité: Rapports 8D"`` -> ``"qualite-rapports-8d"`` (ASCII, lower case, dashes)."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")
    return slug[:MAX_SLUG_CHARS].rstrip("-") or FALLBACK


async def check_chosen(db: AsyncSession, slug: str, served_models: Collection[str]) -> None:
    if not re.match(SLUG_PATTERN, slug):
        raise ValueError("slug must be lower-case letters, digits and dashes (at most 63)")
    if slug in served_models:
        raise conflict(f"slug {slug!r} is the name of a model the workers serve; choose another")
    if await db.scalar(select(Assistant.id).where(Assistant.slug == slug)) is not None:
        raise conflict(
            f"slug {slug!r} is taken (an assistant's slug is never reused, even once archived)"
        )


async def derive(db: AsyncSession, name: str, served_models: Collection[str]) -> str:
    """A free slug from ``name``: its own, or with the first free numeric suffix."""
    base = from_name(name)
    # Every candidate starts so (a suffix shortens a long base to make room for itself).
    prefix = base[: MAX_SLUG_CHARS - 12]
    starting = select(Assistant.slug).where(Assistant.slug.startswith(prefix, autoescape=True))
    taken = set((await db.scalars(starting)).all())
    taken.update(served_models)
    if base not in taken:
        return base
    number = 2
    while True:
        suffix = f"-{number}"
        candidate = base[: MAX_SLUG_CHARS - len(suffix)].rstrip("-") + suffix
        if candidate not in taken:
            return candidate
        number += 1
