"""Compile the CPU kernels with the machine's C compiler and load them through ctypes.

The source is a few hundred lines of plain C with OpenMP: no torch headers, so it builds
in about half a second a file. Built libraries are kept in the kernel cache
(``<cache dir>/kernels``, see inference/cache_dir.py), named by a hash of everything the
build depends on: the source (with the headers beside it that it includes), the flags,
the compiler (its path and ``--version``) and the processor (``-march=native`` builds for
the one it runs on), so a changed input never finds a stale library. A build goes to a
private temporary directory and is renamed into place, so two processes starting together
at worst both build, and never load a half written file. Without a cache directory
(``--no-cache``) each process builds its own copy in a temporary directory, as before.

``-march=native`` lets the compiler use every vector instruction of the processor it runs
on. OpenMP is linked as ``libgomp.so.1``, which is the soname of the runtime torch already
loaded, so the kernels share torch's thread pool rather than starting a second one that
would fight it for the cores.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import tempfile
import threading
from functools import cache
from pathlib import Path
from typing import Any

import torch  # noqa: F401  (loads torch's OpenMP runtime before the kernels need one)

from inference.cache_dir import default_cache_dir, private_subdir
from inference.kernels.cpu.recording import recordable
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
    # Divides and checks for NaN exactly as the torch path (kv_cache.py) does.
    "kv_store": ("-fno-fast-math",),
    "layers": ("-ffp-contract=off", "-mprefer-vector-width=512"),
    "fp8_linear": (),
    "quant_linear": (),
    # Quantizes activations with float arithmetic the tests repeat in torch: kept exact.
    "quant_linear_q8": ("-fno-fast-math",),
    "replay": (),
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
        "paged_decode_splits": [_i64, _i64, _i32],  # sequences, longest context, threads
        "paged_prefill_available": [],
        "paged_prefill_attention": [
            *(_p, _i64, _p, _i64, _i32, _i64),  # query, its stride, out, its stride, dtype, T
            *(_p, _p, _i32, _p, _i64, _i64),  # key, value, dtype, tables, their rows, stride
            *(_p, _i64),  # chunks (table row, first row, query length, context), how many
            *(_i32, _i32, _i32, _i32, _f32, _f32, _f32, _i32),  # as paged_decode_attention
        ],
    },
    "kv_store": {
        "store_kv": [
            *(_p, _i64, _p, _i64, _i32),  # key, its stride, value, its stride, dtype
            *(_p, _p, _i32, _p, _i64, _i32, _i64),  # pools, dtype, slots, T, width, pool slots
            *(_f32, _f32, _i32),  # k_scale, v_scale, threads
        ],
    },
    "layers": {
        "rms_norm": [_p, _i64, _p, _p, _i64, _i32, _f32, _i32, _i32],
        "add_rms_norm": [_p, _i64, _p, _p, _p, _i64, _i32, _f32, _i32, _i32],
        "silu_and_mul": [_p, _i64, _p, _i64, _i32, _i32, _i32],
        "rotary": [_p, _i64, _p, _p, _p, _i64, _i32, _i32, _i32, _i32],
        "fp8_dequantize": [_p, _p, _i64, _i32, _i32, _i32, _p, _i32, _i32],
    },
    "fp8_linear": {
        "fp8_linear_available": [],
        # x, its stride, M, q, scale, N, K, groups, group size, out, x (and out) float32, threads
        "fp8_linear": [_p, _i64, _i64, _p, _p, _i64, _i32, _i32, _i32, _p, _i32, _i32],
    },
    "quant_linear": {
        "quant_linear_available": [],
        # x, its stride, bf16?, M, codes, scale, offset, N, K, bits, group size, out, threads
        "quant_linear": [_p, _i64, _i32, _i64, _p, _p, _p, _i64, _i32, _i32, _i32, _p, _i32],
        # codes, scale, offset, N, K, bits, group size, out, bf16?, threads
        "quant_dequantize": [_p, _p, _p, _i64, _i32, _i32, _i32, _p, _i32, _i32],
    },
    "quant_linear_q8": {
        "quant_linear_q8_available": [],
        # as quant_linear
        "quant_linear_q8": [_p, _i64, _i32, _i64, _p, _p, _p, _i64, _i32, _i32, _i32, _p, _i32],
        # as quant_linear, the weight's three arrays 16 rows interleaved (quant_linear_q8_il.h)
        "quant_linear_q8_il": [_p, _i64, _i32, _i64, _p, _p, _p, _i64, _i32, _i32, _i32, _p, _i32],
    },
    "replay": {
        "replay_calls": [_p, _i64],  # recorded calls (recording.py), how many
    },
}


class KernelBuildError(RuntimeError):
    """No C compiler, or the kernel source did not compile."""


def load_library(name: str, extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """``name``.c compiled and loaded (once per process); raises KernelBuildError if it
    cannot be built here.

    ``extra_flags`` go after the default ones (tests build the portable path with
    ``("-mno-avx512f",)``).
    """
    return _load_once(name, extra_flags, "kernels")


def prebuild_in_background() -> threading.Thread:
    """Start building (or loading from the cache) every kernel in a thread, at the start of
    a model's load: the compiler then runs on another core while Python parses and
    dequantizes the weights, and `load_library` later finds them ready. A failure here is
    left for `load_library` to raise where it is handled."""

    def build_all() -> None:
        for name in SIGNATURES:
            try:
                _load_once(name, (), "kernels_background")
            except KernelBuildError:
                return

    thread = threading.Thread(target=build_all, name="kernel-prebuild", daemon=True)
    thread.start()
    return thread


_loaded: dict[tuple[str, tuple[str, ...]], ctypes.CDLL] = {}
_loading = threading.Lock()  # one build at a time: a second asker waits for the first


def _load_once(name: str, extra_flags: tuple[str, ...], phase_name: str) -> ctypes.CDLL:
    key = (name, extra_flags)
    lib = _loaded.get(key)
    if lib is not None:
        return lib
    with phase(phase_name), _loading:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = _build_and_load(name, extra_flags)
    return lib


def _build_and_load(name: str, extra_flags: tuple[str, ...]) -> ctypes.CDLL:
    source = HERE / f"{name}.c"
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise KernelBuildError("no C compiler (cc or gcc) on PATH")
    flags = (*FLAGS, *SOURCE_FLAGS[name], *extra_flags)
    cache_dir = _usable_cache_dir()
    if cache_dir is None:
        workdir = Path(tempfile.mkdtemp(prefix="enclave-kernels-"))
        try:
            lib = _load(_compile(compiler, flags, source, workdir))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)  # the loaded library stays mapped
        log.info("built CPU kernels %s with %s", source.name, compiler)
        return _declare(name, lib)
    cached = cache_dir / f"{name}-{build_key(compiler, flags, source)}.so"
    if cached.is_file():
        try:
            lib = _declare(name, _load(cached))
        except (KernelBuildError, AttributeError) as error:  # damaged: built again, over it
            log.warning("ignoring the cached kernel library %s: %s", cached, error)
        else:
            log.info("loaded CPU kernels %s from %s", source.name, cached)
            return lib
    workdir = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=cache_dir))
    try:
        built = _compile(compiler, flags, source, workdir)
        # Loaded from its private path (a damaged file of the cached name may be loaded
        # already, and the loader would hand that one back), then published: the rename is
        # atomic, so a concurrent reader sees the old file or this one, never a part.
        lib = _declare(name, _load(built))
        os.replace(built, cached)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)  # the loaded library stays mapped
    log.info("built CPU kernels %s with %s into %s", source.name, compiler, cached)
    return lib


def _compile(compiler: str, flags: tuple[str, ...], source: Path, workdir: Path) -> Path:
    objects, library = workdir / f"{source.stem}.o", workdir / f"{source.stem}.so"
    compile_ = [compiler, *flags, "-c", "-o", str(objects), str(source)]
    link = [compiler, *LINK_FLAGS, "-o", str(library), str(objects), "-lm"]
    try:
        for command in (compile_, link):
            done = subprocess.run(command, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise KernelBuildError(f"{' '.join(command)} failed:\n{done.stderr.strip()}")
    except (OSError, subprocess.TimeoutExpired) as error:
        raise KernelBuildError(f"could not build {source.name}: {error}") from error
    return library


def _load(library: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(library))
    except OSError as error:
        raise KernelBuildError(f"could not load {library}: {error}") from error


def _declare(name: str, lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give each function its signature, and make it recordable (recording.py): the
    library's attribute becomes the wrapper, which every caller then looks up."""
    for function, argtypes in SIGNATURES[name].items():
        fn = getattr(lib, function)
        fn.argtypes = argtypes
        fn.restype = None if name == "layers" else ctypes.c_int
        setattr(lib, function, recordable(fn))
    return lib


# -- the kernel cache ----------------------------------------------------------------------


def kernel_cache_dir() -> Path | None:
    """``<cache dir>/kernels`` (inference/cache_dir.py), read at each build; None: off."""
    base = default_cache_dir()
    return None if base is None else base / "kernels"


def _usable_cache_dir() -> Path | None:
    path = kernel_cache_dir()
    if path is None:
        return None
    try:
        path = private_subdir(path.parent, path.name)
    except OSError as error:
        log.warning(
            "the kernel cache %s cannot be used (%s): building in a temporary one", path, error
        )
        return None
    if not os.access(path, os.W_OK | os.X_OK):
        log.warning("the kernel cache %s is not writable: building in a temporary one", path)
        return None
    return path


def build_key(compiler: str, flags: tuple[str, ...], source: Path) -> str:
    """A hash of everything a built library depends on (see the module's docstring)."""
    digest = hashlib.sha256(source.read_bytes())
    for header in local_includes(source):  # a source that includes none keeps its key
        digest.update(header.read_bytes())
    parts = {
        "source": digest.hexdigest(),
        "flags": [*flags, "|", *LINK_FLAGS],
        "compiler": _compiler_identity(compiler),
        "processor": _processor_identity(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:24]


def local_includes(source: Path) -> list[Path]:
    """The files beside ``source`` that it includes (``#include "name.h"``), and those they
    include in turn, each once, in the order they are first met."""
    found: list[Path] = []
    pending = [source]
    while pending:
        text = pending.pop(0).read_text(encoding="utf-8", errors="replace")
        names = re.findall(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', text, flags=re.MULTILINE)
        for header in (source.parent / name for name in names):
            if header not in found and header != source:
                found.append(header)
                pending.append(header)
    return found


@cache
def _compiler_identity(compiler: str) -> str:
    try:
        done = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
        version = done.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        version = "unknown"
    return f"{os.path.realpath(compiler)}\n{version}"


@cache
def _processor_identity() -> str:
    """The processor's model and feature flags: what ``-march=native`` compiles for."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    wanted = ("model name", "flags", "Features", "CPU part", "isa")
    lines = [line for line in text.split("\n\n", 1)[0].splitlines() if line.startswith(wanted)]
    return "\n".join(lines) or f"{platform.machine()} {platform.processor()}"


def load_paged_decode(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    return load_library("paged_decode", extra_flags)


def load_kv_store(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    return load_library("kv_store", extra_flags)
