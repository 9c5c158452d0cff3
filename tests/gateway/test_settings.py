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


PRODUCTION = {
    "ENCLAVE_MODE": "production",
    "ENCLAVE_SECRET_KEY": "s" * 40,
    "ENCLAVE_DATABASE_URL": "postgresql+asyncpg://db/enclave",
    "ENCLAVE_REDIS_URL": "redis://redis:6379/0",
}


def test_production_refuses_a_plain_http_public_url_unless_told() -> None:
    insecure = {**PRODUCTION, "ENCLAVE_PUBLIC_URL": "http://enclave.example.test"}
    with pytest.raises(SettingsError, match="ENCLAVE_PUBLIC_URL must be https://"):
        Settings.from_env(insecure)
    allowed = Settings.from_env({**insecure, "ENCLAVE_ALLOW_INSECURE_PUBLIC_URL": "true"})
    assert allowed.public_url == "http://enclave.example.test"
    https = {**PRODUCTION, "ENCLAVE_PUBLIC_URL": "https://enclave.example.test"}
    assert Settings.from_env(https).base_url == "https://enclave.example.test"
    # The embedded default may use http (it listens on loopback).
    assert Settings.from_env({"ENCLAVE_PUBLIC_URL": "http://box:8000"}).public_url


def test_production_with_sso_needs_a_public_url() -> None:
    sso = {**PRODUCTION, "ENCLAVE_OIDC_ISSUER": "https://idp.test", "ENCLAVE_OIDC_CLIENT_ID": "c"}
    with pytest.raises(SettingsError, match="ENCLAVE_PUBLIC_URL is required"):
        Settings.from_env(sso)
    assert Settings.from_env({**sso, "ENCLAVE_PUBLIC_URL": "https://enclave.example.test"})
    assert Settings.from_env(PRODUCTION).public_url == ""  # API keys only: not needed


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("ENCLAVE_KEY_OUTAGE_GRACE_SECONDS", "-1"),
        ("ENCLAVE_LOGIN_MAX_FAILURES_PER_ACCOUNT", "0"),
        ("ENCLAVE_LOGIN_MAX_FAILURES_PER_ADDRESS", "0"),
        ("ENCLAVE_LOGIN_FAILURE_WINDOW_SECONDS", "0"),
    ],
)
def test_identity_limits_are_checked(variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        Settings.from_env({variable: value})


def test_identity_defaults() -> None:
    settings = Settings.from_env({})
    assert settings.key_outage_grace_seconds == 300
    assert settings.login_max_failures_per_account == 5
    assert settings.login_max_failures_per_address == 20
    assert settings.login_failure_window_seconds == 900
    assert settings.default_department == "" and not settings.allow_insecure_public_url


def test_oidc_scopes_must_include_openid() -> None:
    sso = {"ENCLAVE_OIDC_ISSUER": "https://idp.example", "ENCLAVE_OIDC_CLIENT_ID": "enclave"}
    assert Settings.from_env(sso).oidc_scopes == "openid email profile groups"
    with pytest.raises(SettingsError, match="ENCLAVE_OIDC_SCOPES must include openid"):
        Settings.from_env({**sso, "ENCLAVE_OIDC_SCOPES": "email profile"})
