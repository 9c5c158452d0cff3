"""The builds of the group-quantized kernels a test can make on this machine, and the path
each must report: the native one (AVX-512 with VNNI on a Zen 4 or a recent Xeon), AVX2
forced on an AVX-512 machine, and plain C."""

from __future__ import annotations

from pathlib import Path

AVX2_ONLY = ("-mno-avx512f",)  # drops every AVX-512 extension with it
PORTABLE = ("-mno-avx2", "-mno-fma", "-mno-f16c")
BUILDS = {"native": (), "avx2": AVX2_ONLY, "portable": PORTABLE}


def cpu_flags() -> set[str]:
    text = Path("/proc/cpuinfo").read_text()
    return set(text.split("flags", 2)[1].split("\n", 1)[0].split()) if "flags" in text else set()


def expected_paths(build: str) -> tuple[str, str]:
    """(exact path, int8 path) that `build` must report here."""
    flags = cpu_flags()
    avx2 = {"avx2", "fma", "f16c"} <= flags
    avx512 = avx2 and {"avx512f", "avx512bw", "avx512vl"} <= flags
    if build == "portable" or not avx2:
        return "portable", "portable"
    if build == "avx2" or not avx512:
        return "avx2", "avx2"
    return "avx512", "avx512-vnni" if "avx512_vnni" in flags else "avx2"
