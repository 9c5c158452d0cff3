from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import Settings, SettingsError, unknown_variables


def test_defaults_without_environment() -> None:
    settings = Settings.from_env({})
    assert settings.port == 8000 and settings.host == "127.0.0.1"
    assert settings.mode == "embedded"


def test_values_are_read_and_converted() -> None:
    settings = Settings.from_env(
        {"ENCLAVE_PORT": "9001", "ENCLAVE_LOG_FORMAT": "JSON", "ENCLAVE_DATA_DIR": "/tmp/x"}
    )
    assert settings.port == 9001
    assert settings.log_format == "json"
    assert settings.data_dir == Path("/tmp/x")


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"ENCLAVE_PORT": "eighty"}, "ENCLAVE_PORT"),
        ({"ENCLAVE_PORT": "70000"}, "ENCLAVE_PORT"),
        ({"ENCLAVE_MODE": "staging"}, "ENCLAVE_MODE"),
        ({"ENCLAVE_LOG_LEVEL": "loud"}, "ENCLAVE_LOG_LEVEL"),
        ({"ENCLAVE_HOST": ""}, "ENCLAVE_HOST"),
    ],
)
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env(env)


def test_unknown_variables_are_listed() -> None:
    env = {"ENCLAVE_PROT": "1", "ENCLAVE_PORT": "1", "PATH": "/bin"}
    assert unknown_variables(env) == ["ENCLAVE_PROT"]


def test_settings_are_frozen() -> None:
    settings = Settings()
    with pytest.raises(AttributeError):
        settings.port = 1  # type: ignore[misc]
