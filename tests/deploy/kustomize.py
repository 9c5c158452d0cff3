"""deploy/kubernetes/ rendered as `kubectl kustomize` would, for the checks (no kustomize
binary is installable here): a kustomization's resources (files, or other kustomizations,
recursively), its `labels` added to every resource's metadata, and its `patches` applied
as strategic-merge patches (maps merged; lists of named maps, or of volume mounts, merged
by name or mount path; any other list replaced). The overlays keep to what this applies;
anything else in a kustomization fails here rather than being silently ignored."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("cpu", "gpu")
KNOWN_FIELDS = {"apiVersion", "kind", "labels", "resources", "patches"}
# Strategic merge keys of the lists these manifests patch.
MERGE_KEYS = ("name", "mountPath", "containerPort")

Resource = dict[str, Any]


def render(directory: Path) -> list[Resource]:
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unknown = set(kustomization) - KNOWN_FIELDS
    assert not unknown, f"{directory}: this renderer does not apply {unknown}"
    resources: list[Resource] = []
    for entry in kustomization.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            resources += render(path)
        else:
            resources += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch in kustomization.get("patches", []):
        assert set(patch) == {"path"}, f"{directory}: only file patches ({patch})"
        change = yaml.safe_load((directory / patch["path"]).read_text())
        [target] = [r for r in resources if key(r) == key(change)]
        merged = merge(target, change)
        target.clear()
        target.update(merged)
    for labels in kustomization.get("labels", []):
        for resource in resources:
            resource.setdefault("metadata", {}).setdefault("labels", {}).update(labels["pairs"])
    return resources


def overlay(name: str) -> list[Resource]:
    return render(KUBERNETES / "overlays" / name)


def key(resource: Resource) -> tuple[str, str]:
    return resource["kind"], resource["metadata"]["name"]


def merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for name, value in patch.items():
            out[name] = merge(base[name], value) if name in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list):
        merge_key = next(
            (k for k in MERGE_KEYS if all(isinstance(i, dict) and k in i for i in base + patch)),
            None,
        )
        if merge_key is None or not base:
            return copy.deepcopy(patch)
        items = copy.deepcopy(base)
        for item in patch:
            same = [i for i, old in enumerate(items) if old[merge_key] == item[merge_key]]
            if same:
                items[same[0]] = merge(items[same[0]], item)
            else:
                items.append(copy.deepcopy(item))
        return items
    return copy.deepcopy(patch)


def find(resources: list[Resource], kind: str, name: str) -> Resource:
    [found] = [r for r in resources if key(r) == (kind, name)]
    return found


def pod_spec(resource: Resource) -> dict[str, Any]:
    spec: dict[str, Any] = resource["spec"]["template"]["spec"]
    return spec
