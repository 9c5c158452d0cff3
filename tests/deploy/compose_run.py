"""Turning compose.yaml's services into local processes: the same commands and variables,
with service names mapped to loopback, ports to free ones, secrets to temp files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Mapping:
    """What a service's strings become here; every rule must be used (see :meth:`unused`)."""

    hosts: dict[str, str]  # "worker:8100" -> "127.0.0.1:PORT"
    ports: dict[str, str]  # "8000" -> "PORT" (ENCLAVE_PORT, --port)
    paths: dict[str, str]  # "/run/secrets/x" or "/models/m.gguf" -> a local path
    used: set[str] = field(default_factory=set)

    def value(self, text: str) -> str:
        if text in self.paths:
            self.used.add(text)
            return self.paths[text]
        for old, new in self.hosts.items():
            if old in text:
                self.used.add(old)
                text = text.replace(old, new)
        if text == "0.0.0.0":  # listen on loopback only, never on the machine's addresses
            return "127.0.0.1"
        return text

    def command(self, argv: list[str]) -> list[str]:
        """``enclave`` is the project's console script (gateway.cli:main); ``python`` is ours."""
        head = {"enclave": [sys.executable, "-m", "gateway"], "python": [sys.executable]}
        out = list(head.get(argv[0], [argv[0]]))
        for i, arg in enumerate(argv[1:], start=1):
            if argv[i - 1] == "--port" and arg in self.ports:
                self.used.add(arg)
                out.append(self.ports[arg])
            else:
                out.append(self.value(arg))
        return out

    def environment(self, env: dict[str, Any]) -> dict[str, str]:
        mapped: dict[str, str] = {}
        for name, value in env.items():
            text = "" if value is None else str(value)
            if name.endswith("_PORT") and text in self.ports:
                self.used.add(text)
                mapped[name] = self.ports[text]
            else:
                mapped[name] = self.value(text)
        return mapped

    def healthcheck(self, test: list[str]) -> list[str]:
        assert test[0] == "CMD", test
        argv = list(test[1:])
        for old, new in self.ports.items():
            argv = [a.replace(f"127.0.0.1:{old}/", f"127.0.0.1:{new}/") for a in argv]
        return self.command(argv)


def base_environment() -> dict[str, str]:
    """This process's environment less every ENCLAVE_* (the service's own come on top)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENCLAVE_")}
    return {**env, "PYTHONPATH": str(ROOT)}


def local_url(compose_url: str, test_url: str, host: str, port: int, path: str) -> str:
    """The URL a secret file holds, pointed at the test service; its shape checked first."""
    parts = urlsplit(compose_url)
    assert (parts.hostname, parts.port, parts.path) == (host, port, path), compose_url
    assert urlsplit(test_url).scheme == parts.scheme, (test_url, compose_url)
    return test_url


def wait_healthy(
    name: str, check: list[str], process: subprocess.Popen[bytes], log: Path, timeout: float
) -> float:
    """Run the service's healthcheck until it passes; the seconds it took."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            raise AssertionError(f"{name} exited {process.returncode}:\n{log.read_text()[-4000:]}")
        done = subprocess.run(check, capture_output=True, timeout=30, env=base_environment())
        if done.returncode == 0:
            return time.monotonic() - start
        time.sleep(0.5)
    raise AssertionError(f"{name} not healthy after {timeout}s:\n{log.read_text()[-4000:]}")


def metric_names(exposition: str) -> set[str]:
    """Every family a /metrics page declares (its # TYPE lines), with the sample suffixes."""
    names: set[str] = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.add(name)
            if kind == "counter":
                names.add(name + "_total")
            if kind == "histogram":
                names |= {name + "_bucket", name + "_sum", name + "_count"}
    return names
