"""compose.yaml as the deployment checks read it: raw, or resolved by docker-compose itself."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
ENV_EXAMPLE = ROOT / ".env.example"
MAKE_SECRETS = ROOT / "docker" / "make-secrets.sh"
PROFILES = {"cpu": ["cpu"], "gpu": ["gpu"], "all": ["cpu", "sso", "observability"]}
# compose's `${NAME}`, `${NAME:-default}`, `${NAME-default}`, `${NAME:?error}`.
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)")


def raw() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def docker_compose() -> str:
    found = shutil.which("docker-compose")
    assert found, "docker-compose is missing: `make deploy-tools` installs Debian's package"
    return found


def run_config(*profiles: str, env_file: Path = ENV_EXAMPLE) -> subprocess.CompletedProcess[str]:
    """`docker-compose config` (no daemon needed) with .env.example as the env file."""
    command = [docker_compose(), "--env-file", str(env_file), "-f", str(COMPOSE)]
    for profile in profiles:
        command += ["--profile", profile]
    return subprocess.run(
        [*command, "config"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


@functools.cache
def resolved(profile_set: str = "all") -> dict[str, Any]:
    """The file after docker-compose's own interpolation, anchors and defaults.

    docker-compose 1.29 lists every service whatever the profiles; :func:`active` filters.
    """
    done = run_config(*PROFILES[profile_set])
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = yaml.safe_load(done.stdout)
    return data


def active(config: dict[str, Any], profiles: list[str]) -> dict[str, dict[str, Any]]:
    """The services `docker compose --profile ... up` starts."""
    return {
        name: service
        for name, service in config["services"].items()
        if not service.get("profiles") or set(service["profiles"]) & set(profiles)
    }


def env_example() -> dict[str, str]:
    values: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            values[name] = value
    return values


def make_secrets(directory: Path) -> dict[str, Path]:
    """Run docker/make-secrets.sh into ``directory``: compose secret name -> its file there."""
    subprocess.run([str(MAKE_SECRETS), str(directory)], check=True, capture_output=True)
    return {name: directory / Path(spec["file"]).name for name, spec in raw()["secrets"].items()}


def secret_target(service: dict[str, Any], name: str) -> str:
    for entry in service.get("secrets", []):
        source = entry if isinstance(entry, str) else entry["source"]
        if source == name:
            target = None if isinstance(entry, str) else entry.get("target")
            return target or f"/run/secrets/{name}"
    raise AssertionError(f"the service does not mount the secret {name}")


def secrets_of(service: dict[str, Any]) -> list[str]:
    return [e if isinstance(e, str) else e["source"] for e in service.get("secrets", [])]


def healthcheck_url(service: dict[str, Any]) -> str:
    """The URL a service's healthcheck (a python -c urlopen one-liner, or wget) asks for."""
    text = " ".join(service["healthcheck"]["test"])
    found = re.search(r"https?://[^'\" ]+", text)
    assert found, f"no URL in the healthcheck {text!r}"
    return found.group(0)


def option(command: list[str], flag: str) -> str:
    assert command.count(flag) == 1, f"{flag} must appear once in {command}"
    return command[command.index(flag) + 1]
