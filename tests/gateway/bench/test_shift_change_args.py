"""`enclave bench shift-change` refuses bad arguments with a readable message before it
starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main


def test_logs_that_is_a_file_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, taken = tmp_path / "model.gguf", tmp_path / "taken"
    model.write_bytes(b"")
    taken.write_text("not a folder")
    argv = ["bench", "shift-change", "--model", str(model), "--logs", str(taken)]
    assert main(argv) == 2
    assert f"--logs {taken}" in capsys.readouterr().err
    assert taken.read_text() == "not a folder"


def test_bad_counts_and_a_missing_model_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"")
    assert main(["bench", "shift-change", "--model", str(model), "--users", "0"]) == 2
    assert "--users" in capsys.readouterr().err
    missing = ["bench", "shift-change", "--model", str(tmp_path / "absent.gguf")]
    assert main(missing) == 2
    assert "no model at" in capsys.readouterr().err
