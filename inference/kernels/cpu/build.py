"""Compile the CPU kernels with the machine's C compiler and load them through ctypes.

The source is a few hundred lines of plain C with OpenMP: no torch headers, so it builds
in about half a second, once per process, into a private temporary directory (nothing is
cached between runs, so nothing can go stale). ``-march=native`` lets the compiler use
every vector instruction of the processor it runs on. OpenMP is linked as ``libgomp.so.1``,
which is the soname of the runtime torch already loaded, so the kernels share torch's
thread pool rather than starting a second one that would fight it for the cores.
"""

from __future__ import annotations

import ctypes
import logging
import shutil
import subprocess
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

import torch  # noqa: F401  (loads torch's OpenMP runtime before the kernels need one)

from inference.startup import phase

log = logging.getLogger("inference.kernels")

HERE = Path(__file__).parent
# -ffast-math lets expf be vectorised (glibc's libmvec); the kernels' inputs are finite, and
# the tests hold them to the torch path's results. layers.c keeps each product and sum as
# torch rounds it, so it must not fuse them into FMAs.
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC", "-std=gnu11")
# Linked in a second step without -ffast-math: a link with it adds crtfastmath.o (GCC
# before 13 does so even for -shared), whose constructor sets flush-to-zero and
# denormals-are-zero for the whole process on load, so Python's and torch's own float
# arithmetic would then silently lose every subnormal.
LINK_FLAGS = ("-shared", "-fopenmp")
SOURCE_FLAGS = {
    "paged_decode": (),
    "layers": ("-ffp-contract=off", "-mprefer-vector-width=512"),
    "fp8_linear": (),
}

_p, _i64, _i32, _f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
# Each C function's parameters, in order (see the .c files).
SIGNATURES: dict[str, dict[str, list[type[Any]]]] = {
    "paged_decode": {
        "paged_decode_attention": [
            *(_p, _i64, _p, _i64, _i32, _p),  # query, its stride, out, its stride, dtype, rows
            *(_p, _p, _i32, _p, _i64, _p, _i64),  # key, value, dtype, tables, stride, lens, B
            *(_i32, _i32, _i32, _i32, _f32, _f32, _f32),  # heads, kv heads, dim, block, scales
            *(_i64, _p, _p, _i32),  # skip, prior, prior_lse, threads
        ],
    },
    "layers": {
        "rms_norm": [_p, _i64, _p, _p, _i64, _i32, _f32, _i32, _i32],
        "silu_and_mul": [_p, _i64, _p, _i64, _i32, _i32, _i32],
        "rotary": [_p, _i64, _p, _p, _p, _i64, _i32, _i32, _i32, _i32],
        "fp8_dequantize": [_p, _p, _i64, _i32, _i32, _i32, _p, _i32, _i32],
    },
    "fp8_linear": {
        "fp8_linear_available": [],
        # x, its stride, M, q, scale, N, K, groups, group size, out, threads
        "fp8_linear": [_p, _i64, _i64, _p, _p, _i64, _i32, _i32, _i32, _p, _i32],
    },
}


class KernelBuildError(RuntimeError):
    """No C compiler, or the kernel source did not compile."""


@cache
def load_library(name: str, extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """``name``.c compiled and loaded; raises KernelBuildError if it cannot be built here.

    ``extra_flags`` go after the default ones (tests build the portable path with
    ``("-mno-avx512f",)``).
    """
    with phase("kernels"):
        return _build_and_load(name, extra_flags)


def _build_and_load(name: str, extra_flags: tuple[str, ...]) -> ctypes.CDLL:
    source = HERE / f"{name}.c"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise KernelBuildError("no C compiler (cc or gcc) on PATH")
    workdir = Path(tempfile.mkdtemp(prefix="enclave-kernels-"))
    objects, library = workdir / f"{name}.o", workdir / f"{name}.so"
    flags = [*FLAGS, *SOURCE_FLAGS[name], *extra_flags]
    compile_ = [compiler, *flags, "-c", "-o", str(objects), str(source)]
    link = [compiler, *LINK_FLAGS, "-o", str(library), str(objects), "-lm"]
    try:
        for command in (compile_, link):
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise KernelBuildError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")
        lib = ctypes.CDLL(str(library))
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelBuildError(f"could not build {source.name}: {error}") from error
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the loaded library stays mapped
    for function, argtypes in SIGNATURES[name].items():
        fn = getattr(lib, function)
        fn.argtypes = argtypes
        fn.restype = None if name == "layers" else ctypes.c_int
    log.info("built CPU kernels %s with %s", source.name, compiler)
    return lib


def load_paged_decode(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    return load_library("paged_decode", extra_flags)
