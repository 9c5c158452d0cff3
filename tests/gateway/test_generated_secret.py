"""The generated secret in the data directory: processes starting together agree on it."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path
from typing import Any

import pytest

from gateway.secret_store import SECRET_FILE, resolve_secret_key
from gateway.settings import Settings, SettingsError

RACERS = 8


def _race(data_dir: Path, barrier: Any, out: Any) -> None:
    barrier.wait()
    try:
        out.put(resolve_secret_key(Settings(data_dir=data_dir)))
    except Exception as error:  # the parent asserts on what came back
        out.put(f"error: {error!r}")


@pytest.mark.parametrize("round_", range(5))
def test_processes_starting_together_read_one_whole_secret(tmp_path: Path, round_: int) -> None:
    # The old O_EXCL-then-write left a moment where a second process read an empty file
    # (and its audit chain refused to start): every racer must see the same, whole secret.
    data_dir = tmp_path / f"data-{round_}"
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(RACERS), context.Queue()
    racers = [context.Process(target=_race, args=(data_dir, barrier, out)) for _ in range(RACERS)]
    for racer in racers:
        racer.start()
    values = [out.get(timeout=30) for _ in racers]
    for racer in racers:
        racer.join(timeout=30)
    assert len(set(values)) == 1, values
    assert len(values[0]) == 64 and not values[0].startswith("error")
    path = data_dir / SECRET_FILE
    assert path.read_text() == values[0] + "\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in data_dir.iterdir()] == [SECRET_FILE]  # no temporary file left


def test_a_later_start_reads_the_same_secret(tmp_path: Path) -> None:
    first = resolve_secret_key(Settings(data_dir=tmp_path))
    assert resolve_secret_key(Settings(data_dir=tmp_path)) == first


def test_an_empty_secret_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / SECRET_FILE).write_text("\n")
    with pytest.raises(SettingsError, match="is empty"):
        resolve_secret_key(Settings(data_dir=tmp_path))
