"""A process that writes audit entries, for the two-process test.

``python -m tests.gateway.audit.write_entries URL TAG COUNT BARRIER_DIR``: connects, says
it is ready (a file ``ready-TAG``), waits for ``go``, then submits COUNT entries in small
bursts so that its batches interleave with the other process's.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.gateway.audit.support import entry, running_writer, sql


async def main(url: str, tag: str, count: int, barrier: Path) -> None:
    async with running_writer(url, barrier / f"spool-{tag}", batch_size=10) as writer:
        await sql(url, "SELECT 1")  # warm: imports and first connection done before the race
        (barrier / f"ready-{tag}").touch()
        while not (barrier / "go").exists():
            await asyncio.sleep(0.005)
        for n in range(count):
            writer.submit(entry(n, tag))
            if n % 10 == 9:
                await asyncio.sleep(0.002)
        await writer.flush()
        if writer.spooled:
            raise SystemExit(f"{tag}: {writer.spooled} entries spooled, expected none")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])))
