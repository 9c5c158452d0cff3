"""The worker's OpenMP wait default: set before torch loads, never over an operator's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from inference.openmp import DEFAULT_SPINCOUNT, configure_openmp_waiting

REPO = Path(__file__).resolve().parents[2]


def test_the_default_is_set_only_where_no_policy_is_named() -> None:
    environ: dict[str, str] = {}
    configure_openmp_waiting(environ)
    assert environ == {"GOMP_SPINCOUNT": DEFAULT_SPINCOUNT}
    for named in ({"OMP_WAIT_POLICY": "passive"}, {"GOMP_SPINCOUNT": "300000"}):
        environ = dict(named)
        configure_openmp_waiting(environ)
        assert environ == named


@pytest.mark.parametrize(
    ("given", "expected"),
    [({}, DEFAULT_SPINCOUNT), ({"OMP_WAIT_POLICY": "active"}, "None")],
)
def test_the_worker_entry_point_sets_it_before_torch_loads(
    given: dict[str, str], expected: str
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    code = (
        "import os, sys; import inference.__main__; "
        "print(os.environ.get('GOMP_SPINCOUNT'), 'torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**env, **given, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [expected, "False"]
