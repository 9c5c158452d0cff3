"""A marker every admin write moves, so caches of keys and departments know to re-read.

The gateway keeps the last lookup of each API key (and its department) while nothing has
changed, instead of asking the database on every request. Whatever changes keys,
departments or limits (the admin API, `enclave admin ...`) bumps the generation after it
commits; every request reads the current one first, so a change applies to the next
request, on every replica. With Redis the marker is one key there (one GET a request);
without Redis (the embedded default, one process) it is a file under the data directory,
which `enclave admin ...` in another process moves too (one stat a request).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from redis.asyncio import Redis
from redis.exceptions import RedisError

from gateway.private_files import private_dir, private_opener

REDIS_KEY = "enclave:config:generation"
FILE_NAME = "config-generation"


class ConfigGeneration:
    def __init__(self, redis: Redis | None, data_dir: Path) -> None:
        self.redis = redis
        self.path = data_dir / FILE_NAME

    async def current(self) -> str | None:
        """The current generation; None when it cannot be read (then nothing is reused)."""
        if self.redis is not None:
            try:
                value = await self.redis.get(REDIS_KEY)
            except (RedisError, OSError):
                return None
            if not value:
                return "0"
            return value.decode() if isinstance(value, bytes) else str(value)
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return "0"
        except OSError:
            return None
        return f"{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_size}"

    async def bump(self) -> None:
        if self.redis is not None:
            # Without Redis the cached entries stay bounded by their age; a write must not
            # fail because of it.
            with contextlib.suppress(RedisError, OSError):
                await self.redis.incr(REDIS_KEY)
            return
        private_dir(self.path.parent)
        temporary = self.path.with_suffix(".tmp")
        with open(temporary, "w", opener=private_opener) as marker:
            marker.write(secrets.token_hex(8))
        os.replace(temporary, self.path)  # a new inode: a changed marker, even within 1 ns


async def bump_for(redis_url: str, data_dir: Path) -> None:
    """Bump from a process without gateway state (the admin CLI)."""
    redis = Redis.from_url(redis_url) if redis_url else None
    try:
        await ConfigGeneration(redis, data_dir).bump()
    finally:
        if redis is not None:
            await redis.aclose()
