"""Two gateway processes writing to one Postgres at once make one valid chain, and one
consistent head log in their shared data directory."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.gateway.audit.support import request_ids_in_seq_order, verify

COUNT = 300


def test_two_processes_interleave_into_one_valid_chain(postgres_url: str, tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.gateway.audit.write_entries",
                postgres_url,
                tag,
                str(COUNT),
                str(tmp_path),
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        for tag in ("a", "b")
    ]
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"ready-{t}").exists() for t in "ab"):
            if any(p.poll() is not None for p in procs):
                for proc in procs:  # the other one waits for "go": stop it before reading
                    proc.kill()
                pytest.fail(f"a writer process died: {[p.communicate()[1] for p in procs]}")
            assert time.monotonic() < deadline, "the writer processes did not get ready"
            time.sleep(0.02)
        (tmp_path / "go").touch()
        for proc in procs:
            _, errors = proc.communicate(timeout=60)
            assert proc.returncode == 0, errors
    finally:
        for proc in procs:
            proc.kill()
    ids = asyncio.run(request_ids_in_seq_order(postgres_url))
    assert sorted(ids) == sorted(f"{t}-{n}" for t in "ab" for n in range(COUNT))
    # Each process's entries stay in its own order; the batches of the two alternate.
    for tag in "ab":
        assert [i for i in ids if i[0] == tag] == [f"{tag}-{n}" for n in range(COUNT)]
    switches = sum(1 for x, y in itertools.pairwise(ids) if x[0] != y[0])
    assert switches >= 3, f"the two writers hardly overlapped ({switches} switches)"
    result = asyncio.run(verify(postgres_url, tmp_path))
    assert (result.ok, result.checked) == (True, 2 * COUNT)
    # Both appended their heads to the one head log; the highest is the chain's head.
    assert result.recorded is not None
    assert (result.recorded.seq, result.recorded.hash) == (2 * COUNT, result.head_hash)
    lines = (tmp_path / "audit-head.log").read_text().splitlines()
    assert len(lines) >= 2 * COUNT // 10 and all(len(line.split()) == 3 for line in lines)
