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

import torch  # noqa: F401  (loads torch's OpenMP runtime before the kernels need one)

log = logging.getLogger("inference.kernels")

SOURCE = Path(__file__).with_name("paged_decode.c")
# -ffast-math lets the softmax's expf be vectorised (glibc's libmvec); the kernel's inputs
# are finite, and the tests hold it to the torch path's results.
FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-shared", "-fPIC", "-std=gnu11")


class KernelBuildError(RuntimeError):
    """No C compiler, or the kernel source did not compile."""


@cache
def load_paged_decode(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The compiled library; raises KernelBuildError if it cannot be built here.

    ``extra_flags`` go after the default ones (tests build the portable path with
    ``("-mno-avx512f",)``).
    """
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise KernelBuildError("no C compiler (cc or gcc) on PATH")
    workdir = Path(tempfile.mkdtemp(prefix="enclave-kernels-"))
    library = workdir / "paged_decode.so"
    command = [compiler, *FLAGS, *extra_flags, "-o", str(library), str(SOURCE), "-lm"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise KernelBuildError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")
        lib = ctypes.CDLL(str(library))
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelBuildError(f"could not build {SOURCE.name}: {error}") from error
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the loaded library stays mapped
    fn = lib.paged_decode_attention
    p, i64, i32, f32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float
    fn.argtypes = [p, i64, p, i64, i32, p, p, p, i32, p, i64, p, i64]
    fn.argtypes += [i32, i32, i32, i32, f32, f32, f32, i64, p, p, i32]
    fn.restype = ctypes.c_int
    log.info("built CPU paged-attention kernel with %s", compiler)
    return lib
