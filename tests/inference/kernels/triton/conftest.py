"""Run this directory's Triton kernels on the CPU, under triton's interpreter.

triton picks the interpreter when a kernel is decorated, so ``TRITON_INTERPRET=1`` is set
while the kernel modules are imported (or re-imported, if something imported them
earlier without it) and then put back as it was: the rest of the suite, and the
processes it starts, never see it.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterator

import pytest

KERNEL_MODULES = [
    "inference.kernels.triton.e4m3",
    "inference.kernels.triton.kv_write",
    "inference.kernels.triton.decode_attention",
    "inference.kernels.triton.chunk_attention",
    "inference.kernels.triton.fp8_matmul",
    "inference.kernels.triton.group_gemm",
    "inference.kernels.triton.fp8_gemv",
    "inference.kernels.triton.fp8_quant",
    "inference.kernels.triton.backend",
]


def _import_interpreted() -> None:
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        from triton.runtime.interpreter import InterpretedFunction

        for name in KERNEL_MODULES:
            module = sys.modules.get(name)
            if module is None:
                importlib.import_module(name)
            else:
                importlib.reload(module)
        from inference.kernels.triton import decode_attention

        if not isinstance(decode_attention._decode_kernel, InterpretedFunction):
            raise RuntimeError("the Triton kernels were not decorated for the interpreter")
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous


_import_interpreted()


@pytest.fixture(autouse=True)
def _interpret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Also set while each test here runs, for anything triton reads at launch."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    yield
