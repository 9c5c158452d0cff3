"""Secret settings from files: ENCLAVE_<NAME>_FILE (compose and Kubernetes mount secrets)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.settings import SECRET_SETTINGS, Settings, SettingsError, env_name, unknown_variables
from inference.secret_env import SecretFileError, secret_from_env

ROOT = Path(__file__).resolve().parents[2]
VALUES = {
    "database_url": "postgresql+asyncpg://enclave:pa55@postgres:5432/enclave",
    "redis_url": "redis://:pa55@redis:6379/0",
    "secret_key": "k" * 40,
    "oidc_client_secret": "client-secret",
    "worker_token": "worker-token",
}


def test_every_secret_setting_is_a_string_field() -> None:
    fields = set(Settings.__dataclass_fields__)
    assert set(SECRET_SETTINGS) <= fields and set(VALUES) == set(SECRET_SETTINGS)


@pytest.mark.parametrize("name", SECRET_SETTINGS)
def test_each_secret_setting_reads_its_file(name: str, tmp_path: Path) -> None:
    secret = tmp_path / name
    secret.write_text(VALUES[name] + "\n")  # `echo value > file` leaves one newline
    settings = Settings.from_env({env_name(name) + "_FILE": str(secret)})
    assert getattr(settings, name) == VALUES[name]


def test_production_starts_on_files_alone(tmp_path: Path) -> None:
    env = {"ENCLAVE_MODE": "production", "ENCLAVE_WORKERS": "http://worker:8100"}
    for name in SECRET_SETTINGS:
        (tmp_path / name).write_text(VALUES[name])
        env[env_name(name) + "_FILE"] = str(tmp_path / name)
    settings = Settings.from_env(env)
    assert settings.secret_key == VALUES["secret_key"]
    assert settings.worker_token == VALUES["worker_token"]
    assert settings.effective_database_url == VALUES["database_url"]


def test_only_one_trailing_newline_is_stripped(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_bytes(b" two spaces and CRLF  \r\n")
    assert secret_from_env({"V_FILE": str(secret)}, "V") == " two spaces and CRLF  "
    secret.write_bytes(b"line\n\n")
    assert secret_from_env({"V_FILE": str(secret)}, "V") == "line\n"


def test_both_forms_at_once_is_an_error(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_text("x" * 40)
    env = {"ENCLAVE_SECRET_KEY": "y" * 40, "ENCLAVE_SECRET_KEY_FILE": str(secret)}
    with pytest.raises(SettingsError, match="ENCLAVE_SECRET_KEY and ENCLAVE_SECRET_KEY_FILE"):
        Settings.from_env(env)


@pytest.mark.parametrize("problem", ["missing", "directory", "empty", "unreadable", "no path"])
def test_a_bad_file_is_a_clear_error(problem: str, tmp_path: Path) -> None:
    path = tmp_path / "worker_token"
    if problem == "directory":
        path.mkdir()
    elif problem == "empty":
        path.write_text("\n")
    elif problem == "unreadable":
        if os.geteuid() == 0:
            path.write_bytes(b"\xff\xfe not utf-8")  # root reads any mode: bad bytes instead
        else:
            path.write_text("t")
            path.chmod(0)
    env = {"ENCLAVE_WORKER_TOKEN_FILE": "" if problem == "no path" else str(path)}
    with pytest.raises(SettingsError, match="ENCLAVE_WORKER_TOKEN_FILE") as refused:
        Settings.from_env(env)
    if problem != "no path":
        assert str(path) in str(refused.value)


def test_file_variables_of_secrets_are_known_and_others_are_not() -> None:
    env = {"ENCLAVE_REDIS_URL_FILE": "/x", "ENCLAVE_PORT_FILE": "/x"}
    assert unknown_variables(env) == ["ENCLAVE_PORT_FILE"]


def test_the_helper_returns_none_when_neither_is_set() -> None:
    assert secret_from_env({}, "V") is None
    assert secret_from_env({"V": ""}, "V") == ""
    with pytest.raises(SecretFileError):
        secret_from_env({"V_FILE": "/nonexistent/enclave/secret"}, "V")


def test_enclave_serve_stops_with_the_message(tmp_path: Path) -> None:
    env = {**os.environ, "ENCLAVE_SECRET_KEY_FILE": str(tmp_path / "absent")}
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "serve"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "configuration error: ENCLAVE_SECRET_KEY_FILE: cannot read" in done.stderr
    assert "Traceback" not in done.stderr
