"""What the gateway writes to disk is its user's alone: directories 0700, files 0600.

Every test runs under umask 022, the usual one, under which a file created with the
default mode is 0644 (readable by every local user) and a directory 0755.
"""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gateway import admin_tasks, cli
from gateway.domain.audit.spool import Spool
from gateway.private_files import tighten_data_dir
from gateway.settings import Settings
from tests.gateway.audit.support import entry


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def assert_private(root: Path) -> list[Path]:
    """``root`` and everything under it: directories 0700, files 0600; the files."""
    assert mode(root) == 0o700, root
    files = []
    for directory, subdirectories, names in os.walk(root):
        for name in subdirectories:
            assert mode(Path(directory, name)) == 0o700, Path(directory, name)
        for name in names:
            path = Path(directory, name)
            if path.is_symlink():
                continue
            assert mode(path) == 0o600, (path, oct(mode(path)))
            files.append(path)
    return files


def test_first_start_creates_a_private_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "deep" / "data"  # missing parents are made private too
    settings = Settings(data_dir=data_dir)
    cli.first_start(settings)
    names = {p.name for p in assert_private(data_dir)}
    assert {"enclave.db", "secret_key", "config-generation"} <= names
    assert mode(tmp_path / "deep") == 0o700


def test_migrating_creates_the_database_private(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    admin_tasks.migrate_database(settings)
    assert {p.name for p in assert_private(tmp_path / "data")} == {"enclave.db"}
    # A database elsewhere (ENCLAVE_DATABASE_URL) is made the same way.
    elsewhere = tmp_path / "db" / "other.db"
    admin_tasks.migrate_database(
        Settings(data_dir=tmp_path / "data", database_url=f"sqlite+aiosqlite:///{elsewhere}")
    )
    assert_private(tmp_path / "db")
    asyncio.run(admin_tasks.create_admin(settings, "root@example.test"))
    assert_private(tmp_path / "data")


def test_spooled_audit_records_are_private(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "data" / "audit-spool")
    spool.append([entry(1), entry(2)])
    (own,) = spool.files()
    (spool.directory / "broken.jsonl").write_text("{not json\n")
    os.chmod(spool.directory / "broken.jsonl", 0o600)  # as a spool of ours would be
    spool.adopt()
    broken = spool.directory / "broken.jsonl"
    spool.read(broken)
    spool.remove(broken)  # its unreadable line is kept beside, in broken.rejected
    spool.close()
    files = {p.name for p in assert_private(tmp_path / "data")}
    assert files == {own.name, "broken.rejected"}


def test_serve_tightens_an_open_data_dir_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "data"
    admin_tasks.migrate_database(Settings(data_dir=data_dir))
    # As an earlier version left it: everything readable by everyone.
    os.chmod(data_dir, 0o755)
    os.chmod(data_dir / "enclave.db", 0o644)
    (data_dir / "worker-8100.log").write_text("a prompt, quoted in a traceback\n")
    (data_dir / "audit-spool").mkdir(mode=0o755)
    (data_dir / "audit-spool" / "1-2-3.jsonl").write_text("")
    (tmp_path / "shared.gguf").write_text("weights")
    (data_dir / "model.gguf").symlink_to(tmp_path / "shared.gguf")
    os.chmod(tmp_path / "shared.gguf", 0o644)

    import uvicorn

    from gateway import logging as gateway_logging

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: served.append(app))
    monkeypatch.setattr(cli, "_freeze_heap", lambda: None)
    # Left as the tests have it, so that capture_logs sees what serve logs.
    monkeypatch.setattr(gateway_logging, "configure_logging", lambda *args: None)
    # Listed workers: serve starts no worker of its own.
    settings = Settings(data_dir=data_dir, workers="http://127.0.0.1:9")
    with capture_logs() as logs:
        assert cli.serve(settings) == 0
    assert served
    files = assert_private(data_dir)
    assert {p.name for p in files} >= {"enclave.db", "worker-8100.log", "1-2-3.jsonl"}
    tightened = {e["path"] for e in logs if e["event"].startswith("tightened permissions")}
    assert {str(data_dir), str(data_dir / "enclave.db"), str(data_dir / "audit-spool")} <= tightened
    assert mode(tmp_path / "shared.gguf") == 0o644  # a symlink's target is not ours to change
    # Once private, nothing more is said.
    with capture_logs() as logs:
        tighten_data_dir(data_dir)
    assert not logs
