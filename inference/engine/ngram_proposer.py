"""The n-gram (prompt lookup) proposer of speculative decoding: no extra model.

Output often repeats text that is already in the context (code being edited, a document
being summarised or quoted). For a sequence ending in the n-gram ``g``, the proposer finds
the latest earlier occurrence of ``g`` in the sequence's own tokens (prompt and output)
and proposes the ``k`` tokens that followed it, trying ``n`` from ``max_n`` down to
``min_n``. The target model then verifies them all in one step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from inference.engine import sequence


class NgramProposer:
    def __init__(self, num_tokens: int, *, max_n: int = 3, min_n: int = 1) -> None:
        """``num_tokens``: k, the most tokens proposed per step; an n-gram shorter than
        ``min_n`` never proposes (a larger ``min_n`` proposes less often, and more surely)."""
        if num_tokens < 1:
            raise ValueError(f"num_speculative_tokens must be at least 1, got {num_tokens}")
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.num_tokens = num_tokens
        self.max_n = max_n
        self.min_n = min_n

    def propose(self, token_ids: Sequence[int], limit: int | None = None) -> list[int]:
        """Up to ``min(k, limit)`` tokens to follow ``token_ids``; [] when no n-gram recurs."""
        k = self.num_tokens if limit is None else min(self.num_tokens, limit)
        length = len(token_ids)
        if k < 1 or length < self.min_n + 1:
            return []
        tokens = np.asarray(token_ids, dtype=np.int64)
        for n in range(min(self.max_n, length - 1), self.min_n - 1, -1):
            suffix = tokens[length - n :]
            # Windows starting at 0 .. length-n-1: every occurrence but the suffix itself,
            # each followed by at least one token.
            windows = sliding_window_view(tokens[: length - 1], n)
            hits = np.flatnonzero((windows == suffix).all(axis=1))
            if hits.size:
                follow = int(hits[-1]) + n
                return [int(t) for t in tokens[follow : follow + k]]
        return []

    def propose_batch(self, rows: list[tuple[sequence.Sequence, int]]) -> dict[int, list[int]]:
        """The `spec_decode.Proposer` interface: each row on its own."""
        proposals = {seq.seq_id: self.propose(seq.token_ids, limit) for seq, limit in rows}
        return {seq_id: tokens for seq_id, tokens in proposals.items() if tokens}

    def retain(self, running: Iterable[sequence.Sequence]) -> None:
        """Nothing is held per sequence."""
