"""deploy/kubernetes/: each overlay rendered (tests/deploy/kustomize.py), validated against
a pinned Kubernetes version's schemas by kubernetes-validate (strict: no unknown field),
and checked against the processes: every ENCLAVE_* variable a real setting, images pinned
and built by the repository's Dockerfiles, probes on the ports and paths the processes
serve, secrets referenced (never inlined) and documented as created by the operator, and
only the gateway let through to the workers."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import kubernetes_validate
import pytest

from gateway.settings import SECRET_SETTINGS, Settings, env_name
from tests.deploy import kustomize as k
from tests.deploy.compose_model import ROOT

KUBERNETES_VERSION = "1.31.0"
DOCS = ROOT / "docs" / "deploy.md"
IMAGES = {
    "enclave-gateway:0.1.0": "gateway.Dockerfile",
    "enclave-worker-cpu:0.1.0": "worker-cpu.Dockerfile",
    "enclave-worker-cuda:0.1.0": "worker-cuda.Dockerfile",
}


def _containers(resources: list[k.Resource]) -> list[tuple[k.Resource, dict[str, Any]]]:
    return [
        (r, c)
        for r in resources
        if r["kind"] in {"Deployment", "Job"}
        for c in k.pod_spec(r)["containers"]
    ]


@pytest.mark.parametrize("overlay", k.OVERLAYS)
def test_each_overlay_is_valid_for_the_pinned_kubernetes(overlay: str) -> None:
    resources = k.overlay(overlay)
    kinds = sorted({r["kind"] for r in resources})
    assert kinds == [
        "ConfigMap", "Deployment", "HorizontalPodAutoscaler", "Job", "NetworkPolicy",
        "PodDisruptionBudget", "Service",
    ]  # fmt: skip
    for resource in resources:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
        assert resource["metadata"]["labels"]["app.kubernetes.io/part-of"] == "enclave"


def test_validation_catches_a_broken_manifest() -> None:
    worker = k.find(k.overlay("cpu"), "Deployment", "enclave-worker")
    k.pod_spec(worker)["containers"][0]["startupProbe"]["httpGet"]["prot"] = 8100
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, KUBERNETES_VERSION, strict=True)


def test_the_gpu_overlay_asks_for_gpus_and_the_cpu_one_does_not() -> None:
    gpu = k.pod_spec(k.find(k.overlay("gpu"), "Deployment", "enclave-worker"))
    [worker] = gpu["containers"]
    assert worker["image"] == "enclave-worker-cuda:0.1.0"
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 1
    parallel = worker["command"][worker["command"].index("--tensor-parallel-size") + 1]
    assert int(parallel) == worker["resources"]["limits"]["nvidia.com/gpu"]
    assert {m["mountPath"] for m in worker["volumeMounts"]} == {
        "/run/secrets",
        "/models",
        "/cache",
        "/dev/shm",
    }
    cpu = k.pod_spec(k.find(k.overlay("cpu"), "Deployment", "enclave-worker"))
    assert cpu["containers"][0]["image"] == "enclave-worker-cpu:0.1.0"
    assert "nvidia.com/gpu" not in str(cpu)


@pytest.mark.parametrize("overlay", k.OVERLAYS)
def test_images_are_pinned_and_built_here(overlay: str) -> None:
    for resource, container in _containers(k.overlay(overlay)):
        image = container["image"]
        assert image in IMAGES, f"{resource['metadata']['name']}: {image}"
        assert (ROOT / "docker" / IMAGES[image]).is_file()
        assert not image.endswith(":latest") and ":" in image


def test_every_enclave_variable_is_a_real_setting_and_production_complete() -> None:
    names = {env_name(f.name) for f in dataclasses.fields(Settings)}
    names |= {env_name(n) + "_FILE" for n in SECRET_SETTINGS}
    config = k.find(k.overlay("cpu"), "ConfigMap", "enclave-gateway")["data"]
    assert set(config) <= names, set(config) - names
    for setting in SECRET_SETTINGS:  # every secret from a file, none inline
        assert env_name(setting) not in config
        assert config[env_name(setting) + "_FILE"] == f"/run/secrets/{setting}"
    settings = Settings.from_env(
        {
            **{n: v for n, v in config.items() if not n.endswith("_FILE")},
            "ENCLAVE_DATABASE_URL": "postgresql+asyncpg://enclave:pw@db.example.com/enclave",
            "ENCLAVE_REDIS_URL": "redis://:pw@redis.example.com:6379/0",
            "ENCLAVE_SECRET_KEY": "x" * 48,
            "ENCLAVE_WORKER_TOKEN": "t" * 32,
        }
    )
    assert settings.mode == "production" and settings.port == 8000
    assert settings.worker_urls == ["http://enclave-worker:8100"]


@pytest.mark.parametrize("overlay", k.OVERLAYS)
def test_ports_probes_and_services_agree_with_the_processes(overlay: str) -> None:
    resources = k.overlay(overlay)
    config = k.find(resources, "ConfigMap", "enclave-gateway")["data"]
    gateway = k.pod_spec(k.find(resources, "Deployment", "enclave-gateway"))["containers"][0]
    port = int(config["ENCLAVE_PORT"])
    assert gateway["ports"][0]["containerPort"] == port
    for probe in ("readinessProbe", "livenessProbe"):
        assert gateway[probe]["httpGet"] == {"path": "/health", "port": port}
    assert k.find(resources, "Service", "enclave-gateway")["spec"]["ports"][0]["targetPort"] == port

    worker_deployment = k.find(resources, "Deployment", "enclave-worker")
    worker = k.pod_spec(worker_deployment)["containers"][0]
    command = worker["command"]
    worker_port = int(command[command.index("--port") + 1])
    assert command[command.index("--host") + 1] == "0.0.0.0"
    assert worker["startupProbe"]["httpGet"] == {"path": "/ready", "port": worker_port}
    assert worker["readinessProbe"]["httpGet"] == {"path": "/ready", "port": worker_port}
    assert worker["livenessProbe"]["httpGet"] == {"path": "/health", "port": worker_port}
    startup = worker["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 900  # a large model
    service = k.find(resources, "Service", "enclave-worker")["spec"]
    assert service["ports"][0]["targetPort"] == worker_port
    assert config["ENCLAVE_WORKERS"] == f"http://enclave-worker:{service['ports'][0]['port']}"
    # The worker's token: the variable --api-key-env names, from the gateway's secret file.
    token_var = command[command.index("--api-key-env") + 1]
    assert worker["env"] == [
        {"name": token_var + "_FILE", "value": "/run/secrets/worker_token"},
        {"name": "INFERENCE_CACHE_DIR", "value": "/cache"},
    ]
    # The start-up caches live on a volume of the pod (a restarted container starts warm).
    mounts = {m["mountPath"]: m["name"] for m in worker["volumeMounts"]}
    volumes = {v["name"]: v for v in k.pod_spec(worker_deployment)["volumes"]}
    assert "emptyDir" in volumes[mounts["/cache"]]
    assert config["ENCLAVE_WORKER_TOKEN_FILE"] == "/run/secrets/worker_token"


def test_secrets_are_referenced_and_the_operator_is_told_to_create_them() -> None:
    resources = k.overlay("gpu")
    text = "\n".join(str(r) for r in resources)
    assert "kind': 'Secret'" not in text  # never inlined: the operator creates them
    docs = DOCS.read_text()
    created = re.search(
        r"kubectl create secret generic (\S+)((?:\s+\\\n\s+--from-file=\S+)+)", docs
    )
    assert created, "docs/deploy.md shows no `kubectl create secret generic` command"
    keys = set(re.findall(r"--from-file=(\w+)=", created[2]))
    for resource, _ in _containers(resources):
        for volume in k.pod_spec(resource).get("volumes", []):
            secret = volume.get("secret")
            if secret:
                assert secret["secretName"] == created[1]
                wanted = {i["key"] for i in secret.get("items", [])} or set(SECRET_SETTINGS)
                assert wanted <= keys, wanted - keys
    assert set(SECRET_SETTINGS) <= keys
    claims = {
        v["persistentVolumeClaim"]["claimName"]
        for r, _ in _containers(resources)
        for v in k.pod_spec(r).get("volumes", [])
        if "persistentVolumeClaim" in v
    }
    assert claims == {"enclave-models"} and "enclave-models" in docs


def test_only_the_gateway_reaches_the_workers() -> None:
    resources = k.overlay("cpu")
    policy = k.find(resources, "NetworkPolicy", "enclave-worker-ingress")["spec"]
    worker = k.find(resources, "Deployment", "enclave-worker")
    gateway = k.find(resources, "Deployment", "enclave-gateway")
    assert policy["podSelector"]["matchLabels"] == worker["spec"]["selector"]["matchLabels"]
    [rule] = policy["ingress"]
    [source] = rule["from"]
    assert source == {"podSelector": {"matchLabels": gateway["spec"]["selector"]["matchLabels"]}}
    assert rule["ports"] == [{"protocol": "TCP", "port": 8100}]


def test_the_gateway_scales_and_survives_drains() -> None:
    resources = k.overlay("cpu")
    hpa = k.find(resources, "HorizontalPodAutoscaler", "enclave-gateway")["spec"]
    assert hpa["scaleTargetRef"]["name"] == "enclave-gateway" and hpa["minReplicas"] >= 2
    pdb = k.find(resources, "PodDisruptionBudget", "enclave-gateway")["spec"]
    gateway = k.find(resources, "Deployment", "enclave-gateway")
    assert pdb["selector"] == gateway["spec"]["selector"]
    assert pdb["minAvailable"] < hpa["minReplicas"]
    job = k.find(resources, "Job", "enclave-migrate")
    assert k.pod_spec(job)["containers"][0]["command"] == ["enclave", "migrate"]


def test_a_worker_rollout_starts_the_new_pod_before_stopping_the_old() -> None:
    worker = k.find(k.overlay("cpu"), "Deployment", "enclave-worker")["spec"]
    assert worker["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert (
        k.pod_spec(k.find(k.overlay("cpu"), "Deployment", "enclave-worker"))[
            "terminationGracePeriodSeconds"
        ]
        >= 30
    )  # the worker's own drain
