"""The kernel cache: built once per key, loaded after; concurrent builders, damaged files."""

from __future__ import annotations

import logging
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from inference.kernels.cpu import build
from inference.kernels.cpu.build import FLAGS, SOURCE_FLAGS, build_key

REPO_ROOT = Path(__file__).resolve().parents[4]
LOAD = (
    "import logging, sys; logging.basicConfig(level='INFO', stream=sys.stdout);"
    "from inference.kernels.cpu.build import load_library;"
    "lib = load_library('paged_decode'); print('loaded', lib._name)"
)


def _load_in_a_process(cache_dir: Path) -> subprocess.Popen[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO_ROOT),
        "INFERENCE_CACHE_DIR": str(cache_dir),
    }
    return subprocess.Popen(
        [sys.executable, "-c", LOAD], env=env, cwd=REPO_ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip


def test_two_processes_building_at_once_leave_one_whole_library(tmp_path: Path) -> None:
    cache_dir = tmp_path / "cache"
    first, second = _load_in_a_process(cache_dir), _load_in_a_process(cache_dir)
    outputs = [process.communicate(timeout=300)[0] for process in (first, second)]
    assert [first.returncode, second.returncode] == [0, 0], outputs
    kernels = cache_dir / "kernels"
    assert [stat.S_IMODE(d.stat().st_mode) for d in (cache_dir, kernels)] == [0o700, 0o700]
    (library,) = kernels.iterdir()  # no temporary directory or file left behind
    assert library.name.startswith("paged_decode-") and library.suffix == ".so"
    assert library.read_bytes()[:4] == b"\x7fELF"
    third = _load_in_a_process(cache_dir)
    output = third.communicate(timeout=300)[0]
    assert third.returncode == 0, output
    assert f"loaded CPU kernels paged_decode.c from {library}" in output
    assert list(kernels.iterdir()) == [library]


def test_a_damaged_library_is_built_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("INFERENCE_CACHE_DIR", str(tmp_path))
    build._build_and_load("paged_decode", ())  # not through load_library's memo
    (library,) = (tmp_path / "kernels").iterdir()
    # A damaged file put in its place, as a crash or a bad copy leaves it; never written
    # over in place: this process has the library mapped, and a mapped file cut short is
    # a SIGBUS when the loader touches it again (at exit, running its finalizers).
    damaged = library.with_name("damaged")
    damaged.write_bytes(b"not a shared library")
    damaged.replace(library)
    with caplog.at_level(logging.INFO, logger="inference.kernels"):
        lib = build._build_and_load("paged_decode", ())
    assert "ignoring the cached kernel library" in caplog.text
    assert lib.paged_decode_attention.__wrapped__.argtypes  # declared: the rebuilt library works
    assert library.read_bytes()[:4] == b"\x7fELF"


def test_without_a_cache_nothing_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERENCE_CACHE_DIR", "off")
    assert build.kernel_cache_dir() is None
    lib = build._build_and_load("paged_decode", ())
    assert lib.paged_decode_attention.__wrapped__.argtypes
    monkeypatch.setenv("INFERENCE_CACHE_DIR", str(tmp_path))
    assert build.kernel_cache_dir() == tmp_path / "kernels"


def test_the_key_follows_source_flags_and_compiler(tmp_path: Path) -> None:
    source = tmp_path / "k.c"
    source.write_text("int f(void) { return 1; }\n")
    flags = (*FLAGS, *SOURCE_FLAGS["layers"])
    key = build_key("/usr/bin/cc", flags, source)
    assert key == build_key("/usr/bin/cc", flags, source)
    assert key != build_key("/usr/bin/cc", (*flags, "-mno-avx512f"), source)
    assert key != build_key("/nonexistent/cc", flags, source)
    source.write_text("int f(void) { return 2; }\n")
    assert key != build_key("/usr/bin/cc", flags, source)


def test_the_key_follows_the_headers_a_source_includes(tmp_path: Path) -> None:
    source, header = tmp_path / "k.c", tmp_path / "k_part.h"
    header.write_text("static int g(void) { return 1; }\n")
    source.write_text('#include <stdint.h>\n#include "k_part.h"\nint f(void) { return g(); }\n')
    assert build.local_includes(source) == [header]
    key = build_key("/usr/bin/cc", FLAGS, source)
    header.write_text("static int g(void) { return 2; }\n")
    assert key != build_key("/usr/bin/cc", FLAGS, source)
    assert build.local_includes(build.HERE / "quant_linear_q8.c") == [
        build.HERE / "prefetch_rows.h",
        build.HERE / "quant_linear_q8_quantize.h",
        build.HERE / "quant_linear_q8_tile.h",
        build.HERE / "quant_linear_q8_il.h",
    ]


def test_the_key_follows_headers_that_headers_include(tmp_path: Path) -> None:
    """paged_decode.c includes paged_prefill.h, which includes paged_prefill_bf16.h: an edit
    to the inner one must rebuild the kernel too."""
    source, outer, inner = tmp_path / "k.c", tmp_path / "k_outer.h", tmp_path / "k_inner.h"
    inner.write_text('#include "k_outer.h" /* a cycle is followed once */\nstatic int h = 1;\n')
    outer.write_text('#include "k_inner.h"\n')
    source.write_text('#include "k_outer.h"\nint f(void) { return h; }\n')
    assert build.local_includes(source) == [outer, inner]
    key = build_key("/usr/bin/cc", FLAGS, source)
    inner.write_text('#include "k_outer.h"\nstatic int h = 2;\n')
    assert key != build_key("/usr/bin/cc", FLAGS, source)
    assert build.local_includes(build.HERE / "paged_decode.c") == [
        build.HERE / "paged_decode_avx512.h",
        build.HERE / "paged_prefill.h",
        build.HERE / "paged_prefill_bf16.h",
    ]


PREBUILD = (
    "import logging, sys; logging.basicConfig(level='INFO', stream=sys.stdout);"
    "from inference.kernels.cpu import build;"
    "build.prebuild_in_background().join();"
    "assert sorted(name for name, _ in build._loaded) == sorted(build.SIGNATURES);"
    "assert build.load_library('layers') is build._loaded['layers', ()];"
    "print('ok')"
)


def test_prebuilding_in_the_background_leaves_every_kernel_loaded(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO_ROOT),
        "INFERENCE_CACHE_DIR": str(tmp_path),
    }
    done = subprocess.run(
        [sys.executable, "-c", PREBUILD], env=env, cwd=REPO_ROOT, text=True,
        capture_output=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0 and done.stdout.endswith("ok\n"), done.stdout + done.stderr
    assert "start-up: kernels_background took" in done.stdout
    assert len(list((tmp_path / "kernels").glob("*.so"))) == len(build.SIGNATURES)
