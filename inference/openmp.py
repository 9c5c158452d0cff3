"""How the worker's OpenMP threads wait between parallel regions, set before torch loads.

torch's CPU kernels and the engine's C kernels run their loops on OpenMP (libgomp). Between
two parallel regions a libgomp thread spins for GOMP_SPINCOUNT iterations (300,000 by
default) before it sleeps. On a machine of its own that is what makes
a decode step fast: a token is hundreds of short regions. Beside other busy processes on
the same cores, though, threads spinning at a barrier hold a core while the thread they
wait for is not running, and the worker slowed down many times over.

Measured through the worker's API on 2 cores with 2 other processes spinning
(scripts/openmp_wait_bench.py, docs/benchmarks/openmp-wait-smollm2-cpu-2026-12-04.json):
with 3,000 iterations a 2,700-token prompt took 22-24 s against 43-65 s with libgomp's
default, and a 128-token answer 10-11 s against 31-39 s. Alone on the machine the two
were within the runs' noise. A passive policy (no spinning) did a little better beside
the busy processes (14-19 s and 6-9 s), but alone it made decoding 1.9x slower. So the
worker defaults to 3,000 iterations, unless its environment already names a policy
(OMP_WAIT_POLICY or GOMP_SPINCOUNT, which an operator can pass to the worker).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

DEFAULT_SPINCOUNT = "3000"


def configure_openmp_waiting(environ: MutableMapping[str, str] = os.environ) -> None:
    """Set GOMP_SPINCOUNT unless a wait policy is already set. It must run before torch
    (or a kernel library) loads libgomp, which reads the environment once, at load."""
    if "OMP_WAIT_POLICY" not in environ and "GOMP_SPINCOUNT" not in environ:
        environ["GOMP_SPINCOUNT"] = DEFAULT_SPINCOUNT
