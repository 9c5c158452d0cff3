"""compose.yaml by its rules: the Compose schema, docker-compose's parse of each profile,
pinned images, conditions on every dependency, Caddy alone published, secrets from files,
and the gateway's settings complete for production."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import SECRET_SETTINGS, Settings, env_name
from tests.deploy import compose_model as cm

GATEWAY_SERVICES = ("gateway", "migrate")
WORKER_SERVICES = ("worker-cpu", "worker-gpu")
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "check-jsonschema"
    assert tool.exists(), "check-jsonschema is missing: it comes with the test extras"
    command = [str(tool), "--builtin-schema", "vendor.compose-spec", str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def test_the_file_matches_the_compose_specification_schema(tmp_path: Path) -> None:
    done = check_jsonschema(cm.COMPOSE)
    assert done.returncode == 0, done.stdout + done.stderr
    # The validator refuses what the specification does not allow.
    broken = tmp_path / "compose.yaml"
    broken.write_text(cm.COMPOSE.read_text().replace("depends_on:", "depends_upon:", 1))
    assert check_jsonschema(broken).returncode != 0


@pytest.mark.parametrize("profile_set", sorted(cm.PROFILES))
def test_docker_compose_parses_each_profile(profile_set: str) -> None:
    done = cm.run_config(*cm.PROFILES[profile_set])
    assert done.returncode == 0, done.stderr
    services = set(cm.active(cm.resolved(profile_set), cm.PROFILES[profile_set]))
    base = {"postgres", "redis", "migrate", "gateway", "caddy"}
    expected = {
        "cpu": base | {"fetch-model", "worker-cpu"},
        "gpu": base | {"worker-gpu"},
        "all": base | {"fetch-model", "worker-cpu", "dex", "prometheus", "grafana"},
    }[profile_set]
    assert services == expected


def test_cpu_is_the_default_profile() -> None:
    assert cm.env_example()["COMPOSE_PROFILES"] == "cpu"


def test_every_image_is_pinned() -> None:
    for name, service in cm.raw()["services"].items():
        image = service["image"]
        repository, _, tag = image.rpartition(":")
        assert repository and "/" not in tag, f"{name}: {image} has no tag"
        assert tag != "latest" and any(c.isdigit() for c in tag), f"{name}: {image} is not pinned"


def test_every_dependency_has_a_condition() -> None:
    services = cm.raw()["services"]
    for name, service in services.items():
        depends = service.get("depends_on", {})
        assert isinstance(depends, dict), f"{name}: depends_on must name conditions"
        for target, spec in depends.items():
            assert spec.get("condition") in CONDITIONS, f"{name} -> {target}"
            assert target in services
    gateway = services["gateway"]["depends_on"]
    assert gateway["migrate"]["condition"] == "service_completed_successfully"
    assert services["migrate"]["command"] == ["enclave", "migrate"]
    assert services["migrate"]["restart"] == "no"
    worker = services["worker-cpu"]["depends_on"]
    assert worker["fetch-model"]["condition"] == "service_completed_successfully"


def test_only_caddy_publishes_ports() -> None:
    published = {n for n, s in cm.raw()["services"].items() if s.get("ports") or s.get("expose")}
    assert published == {"caddy"}
    ports = cm.raw()["services"]["caddy"]["ports"]
    assert {"443:443", "80:80"} <= set(ports)


def _worker_token_var(service: dict[str, Any]) -> str:
    return cm.option(service["command"], "--api-key-env")


def test_every_enclave_variable_is_a_real_setting() -> None:
    gateway_names = {env_name(f.name) for f in dataclasses.fields(Settings)}
    gateway_names |= {env_name(n) + "_FILE" for n in SECRET_SETTINGS}
    for name, service in cm.resolved("all")["services"].items():
        variables = {v for v in service.get("environment", {}) if v.startswith("ENCLAVE_")}
        if name in GATEWAY_SERVICES:
            assert variables <= gateway_names, variables - gateway_names
        elif name in WORKER_SERVICES:
            token = _worker_token_var(service)  # the worker's only variable: its token
            assert variables == {token + "_FILE"}
        else:
            assert not variables, f"{name} sets {variables}: no such setting of {name}"


def test_every_secret_comes_from_a_file() -> None:
    config = cm.resolved("all")
    for name, service in config["services"].items():
        environment = service.get("environment", {})
        for variable, value in environment.items():
            if variable.endswith("_FILE"):
                secret = Path(value).name
                assert secret in cm.secrets_of(service), f"{name}: {variable} not mounted"
                assert value == cm.secret_target(service, secret)
            assert not any(w in variable for w in ("PASSWORD", "SECRET", "TOKEN")) or (
                variable.endswith(("_FILE", "__FILE"))
            ), f"{name}: {variable} is given inline"
        if name in GATEWAY_SERVICES:
            for setting in SECRET_SETTINGS:
                assert env_name(setting) not in environment
                assert env_name(setting) + "_FILE" in environment, f"{name}: {setting}"
    gateway, worker = config["services"]["gateway"], config["services"]["worker-cpu"]
    token_var = _worker_token_var(worker)
    assert (
        gateway["environment"]["ENCLAVE_WORKER_TOKEN_FILE"]
        == (worker["environment"][token_var + "_FILE"])
    )


def test_make_secrets_writes_every_secret_file_consistently(tmp_path: Path) -> None:
    files = cm.make_secrets(tmp_path / "secrets")
    assert (tmp_path / "secrets").stat().st_mode & 0o777 == 0o700
    for name, spec in cm.raw()["secrets"].items():
        assert spec["file"].startswith("./secrets/"), name
        assert files[name].read_text().strip(), f"{name} is empty"
    text = {name: path.read_text().strip() for name, path in files.items()}
    password = text["postgres_password"]
    assert text["database_url"] == (
        f"postgresql+asyncpg://enclave:{password}@postgres:5432/enclave"
    )
    postgres = cm.raw()["services"]["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_DB"]) == ("enclave", "enclave")
    redis_password = text["redis_conf"].removeprefix("requirepass ")
    assert text["redis_url"] == f"redis://:{redis_password}@redis:6379/0"
    before = {name: path.read_text() for name, path in files.items()}
    cm.make_secrets(tmp_path / "secrets")  # a second run keeps every file
    assert {name: path.read_text() for name, path in files.items()} == before


def gateway_environment(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The gateway service's variables, its /run/secrets paths pointing at real files."""
    files = cm.make_secrets(tmp_path / "secrets")
    gateway = cm.resolved("all")["services"]["gateway"]
    env = dict(gateway["environment"])
    for variable, value in env.items():
        if variable.endswith("_FILE"):
            env[variable] = str(files[Path(value).name])
    return {**env, **(extra or {})}


def test_the_gateway_has_every_setting_production_requires(tmp_path: Path) -> None:
    settings = Settings.from_env(gateway_environment(tmp_path))
    assert settings.mode == "production" and settings.worker_urls == ["http://worker:8100"]
    assert settings.public_url == "https://enclave.lan" and len(settings.secret_key) >= 32
    assert settings.database_url.startswith("postgresql+asyncpg://enclave:")
    assert settings.redis_url.startswith("redis://:")
    # With the sso profile's Dex (the issuer .env.example names) it still starts.
    issuer = {"ENCLAVE_OIDC_ISSUER": "http://enclave.lan:5556/dex"}
    assert Settings.from_env(gateway_environment(tmp_path, issuer)).oidc_client_secret
