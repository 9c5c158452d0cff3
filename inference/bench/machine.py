"""What a benchmark ran on, for its JSON: the same command gives different numbers on an
Intel (AMX) and an AMD (AVX-512 only) machine of the same size."""

from __future__ import annotations

import platform
from pathlib import Path

# Instruction sets the CPU kernels choose between, as /proc/cpuinfo names them.
KERNEL_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                "amx_tile")  # fmt: skip


def cpu_model() -> str:
    """The processor's model name, its family and model numbers (a virtual machine's name
    may say only "AMD EPYC": the numbers tell Zen 1 from Zen 4) and the kernel-relevant
    instruction sets, from Linux's /proc/cpuinfo; else what platform says."""
    try:
        fields: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if not key.strip():
                break  # the first processor is enough
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        fields = {}
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    flags = set(fields.get("flags", "").split())
    present = " ".join(flag for flag in KERNEL_FLAGS if flag in flags)
    family = f"family {fields.get('cpu family', '?')} model {fields.get('model', '?')}"
    return f"{fields['model name']} ({family}; {present or 'no AVX2'})"


def process_status_bytes(key: str) -> int | None:
    """A size from Linux's /proc/self/status ("VmRSS", "VmHWM"...) in bytes, or None."""
    try:
        for line in Path("/proc/self/status").read_text(encoding="utf-8").splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss_bytes() -> int | None:
    """The process's resident memory now (Linux), or None elsewhere."""
    return process_status_bytes("VmRSS")
