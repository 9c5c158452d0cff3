"""How long a step will take, learned from the steps that ran. No tensors.

A step's time is modelled as ``base + per_row * rows + per_kpair * pairs / 1000``:
``rows`` are the query rows it feeds (prefill tokens, decode rows, proposed tokens) and
``pairs`` the (query, key) pairs attention reads, ``sum(rows_i * context_i)``, which is
what makes a chunk late in a long prompt dearer than the first. The three coefficients
are a least-squares fit over the steps seen, older steps weighted down by ``forget`` per
step (about the last ``1 / (1 - forget)`` steps count), pulled towards a prior by a
ridge term so that the fit is defined from the first step on, and stays sensible while
every step looks alike (all decodes: rows and pairs move together with the constant).

The scheduler asks it two things: how long a set of rows would take (``predict_ms``),
and how many prompt tokens from a given position fit in a time (``tokens_within``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

# Features are scaled so that a typical step's are about 1: (1, rows / ROWS, pairs / PAIRS).
ROWS = 256.0
PAIRS = 256.0 * 1024.0
# A CPU-sized prior (ms): a step's fixed cost, per row, per thousand attention pairs.
PRIOR_MS = (20.0, 0.4, 0.1)


def step_features(chunks: Iterable[tuple[int, int]]) -> tuple[int, int]:
    """(rows, pairs) of a step made of ``(start, rows)`` chunks: each row attends to its
    own position and everything before it."""
    rows = pairs = 0
    for start, n in chunks:
        rows += n
        pairs += n * start + n * (n + 1) // 2
    return rows, pairs


class StepCostModel:
    def __init__(
        self,
        prior_ms: tuple[float, float, float] = PRIOR_MS,
        forget: float = 0.9,
        prior_weight: float = 0.01,
    ) -> None:
        if not 0 < forget < 1:
            raise ValueError(f"forget must be in (0, 1), got {forget}")
        base, per_row, per_kpair = prior_ms
        self._prior = np.array([base, per_row * ROWS, per_kpair * PAIRS / 1000.0])
        self._ridge = prior_weight * np.eye(3)
        self._forget = forget
        self._gram = np.zeros((3, 3))
        self._moment = np.zeros(3)
        self._theta = self._prior.copy()
        self.num_observed = 0

    @property
    def coefficients_ms(self) -> tuple[float, float, float]:
        """(base, per row, per thousand pairs), as fitted now."""
        base, row, pair = self._theta
        return float(base), float(row / ROWS), float(pair * 1000.0 / PAIRS)

    def observe(self, rows: int, pairs: int, elapsed_ms: float) -> None:
        """One step ran: ``rows`` and ``pairs`` took ``elapsed_ms``."""
        if rows <= 0 or not math.isfinite(elapsed_ms) or elapsed_ms < 0:
            return
        x = np.array([1.0, rows / ROWS, pairs / PAIRS])
        self._gram = self._forget * self._gram + np.outer(x, x)
        self._moment = self._forget * self._moment + elapsed_ms * x
        theta = np.linalg.solve(self._gram + self._ridge, self._moment + self._ridge @ self._prior)
        # Time only grows with work: a fit that says otherwise (noise) is clipped.
        self._theta = np.maximum(theta, [0.0, 1e-6 * ROWS, 0.0])
        self.num_observed += 1

    def predict_ms(self, rows: int, pairs: int) -> float:
        base, row, pair = self._theta
        return float(base + row * rows / ROWS + pair * pairs / PAIRS)

    def marginal_ms(self, start: int, n: int) -> float:
        """What ``n`` more prompt tokens from position ``start`` add to a step."""
        _, row, pair = self._theta
        rows, pairs = step_features([(start, n)])
        return float(row * rows / ROWS + pair * pairs / PAIRS)

    def tokens_within(self, ms: float, start: int) -> int:
        """The most prompt tokens from position ``start`` whose marginal cost is at most
        ``ms`` (0 when not even one fits)."""
        if ms <= 0:
            return 0
        _, row, pair = self._theta
        a = pair / PAIRS / 2.0  # cost = a n^2 + b n, from step_features
        b = row / ROWS + pair / PAIRS * (start + 0.5)
        n = ms / b if a <= 0 else (-b + math.sqrt(b * b + 4.0 * a * ms)) / (2.0 * a)
        n_int = int(n)
        while n_int > 0 and self.marginal_ms(start, n_int) > ms:  # float rounding
            n_int -= 1
        return n_int
