"""The spool file on its own: order kept across file rotation, counts, removal."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.domain.audit import spool as spool_module
from gateway.domain.audit.spool import Spool
from tests.gateway.audit.support import entry


def test_records_stay_in_order_across_rotated_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spool_module, "RECORDS_PER_FILE", 10)
    spool = Spool(tmp_path / "spool")
    for start in range(0, 25, 5):
        spool.append([entry(n) for n in range(start, start + 5)])
    files = spool.files()
    assert spool.count == 25 and len(files) == 3
    read = [e.request_id for path in files for e in spool.read(path)]
    assert read == [f"t-{n}" for n in range(25)]
    spool.remove(files[0])
    assert spool.count == 15 and not files[0].exists()
    spool.close()
    heir = Spool(tmp_path / "spool")  # a later start takes the rest over
    heir.adopt()
    assert heir.count == 15
    assert heir.read(heir.files()[0])[0].request_id == "t-10"
    heir.close()
