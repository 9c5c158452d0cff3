"""Fixtures shared by the CPU kernel tests."""

from __future__ import annotations

import pytest

from inference.kernels.cpu.layers import CpuLayerKernels, load_layer_kernels


@pytest.fixture(scope="module")
def kernels() -> CpuLayerKernels:
    """The layer kernels, built for this machine (`make test` installs the compiler)."""
    loaded = load_layer_kernels()
    if loaded is None:
        pytest.fail("the CPU kernels must build on the test machine")
    return loaded
