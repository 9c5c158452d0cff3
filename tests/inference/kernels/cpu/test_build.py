"""Loading the CPU kernels leaves the process's floating-point state alone."""

from __future__ import annotations

import sys

import pytest

from inference.kernels.cpu.build import SIGNATURES, load_library


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_loading_keeps_subnormals(name: str) -> None:
    # A library linked with -ffast-math sets flush-to-zero and denormals-are-zero for the
    # whole process when it loads; Python's own floats then lose their subnormals (found by
    # the worker's fuzz test: Hypothesis refuses to generate floats in such a process).
    load_library(name)
    smallest_normal = sys.float_info.min
    assert smallest_normal / 2 > 0.0
    assert 5e-324 * 1 > 0.0
