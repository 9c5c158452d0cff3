"""Token masks for the constrained rows of a step: filled beside the forward pass, applied
to those rows' logits only, before the sampler sees them.

llguidance writes one mask per matcher as int32 bit words (``ceil(V / 32)`` per row, bit
``t % 32`` of word ``t // 32`` set when token ``t`` is allowed). The fill runs on a thread
of its own while the model's forward pass runs (torch releases the GIL in its kernels and
llguidance in its mask computation); ``apply`` waits for it, unpacks the bits and sets the
disallowed logits to -inf. Rows without a matcher are never touched.
"""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field

import llguidance
import numpy as np
import numpy.typing as npt
import torch


@dataclass
class MaskStats:
    """Totals since the engine started (the benchmark reads them)."""

    steps: int = 0  # steps with at least one constrained row
    rows: int = 0
    fill_s: float = 0.0  # llguidance computing masks (on the fill thread)
    wait_s: float = 0.0  # the step waiting for the fill after its forward pass
    apply_s: float = 0.0  # unpacking the bits and masking the logits

    def as_dict(self) -> dict[str, float]:
        per_step = max(self.steps, 1)
        return {
            "constrained_steps": self.steps,
            "constrained_rows": self.rows,
            "mask_fill_ms_per_step": 1000 * self.fill_s / per_step,
            "mask_wait_ms_per_step": 1000 * self.wait_s / per_step,
            "mask_apply_ms_per_step": 1000 * self.apply_s / per_step,
        }


@dataclass
class PendingMasks:
    rows: list[int]  # the logits rows (sampling order) the masks belong to
    bitmask: torch.Tensor  # (len(rows), words) int32
    future: concurrent.futures.Future[float] | None = None
    fill_s: float = field(default=0.0)


class MaskFiller:
    """``overlap=False`` fills on the calling thread at ``start`` (the benchmark compares)."""

    def __init__(self, vocab_size: int, *, overlap: bool = True) -> None:
        self.vocab_size = vocab_size
        self.words = (vocab_size + 31) // 32
        self.overlap = overlap
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.stats = MaskStats()

    def start(self, rows: list[tuple[int, llguidance.LLMatcher]]) -> PendingMasks | None:
        """Begin filling the masks of ``rows`` (logits row, matcher); None when there are
        none. The matchers must not advance until ``apply`` has returned."""
        if not rows:
            return None
        bitmask = torch.empty((len(rows), self.words), dtype=torch.int32)
        matchers = [matcher for _row, matcher in rows]
        pending = PendingMasks([row for row, _matcher in rows], bitmask)
        if self.overlap:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="masks")
            pending.future = self._pool.submit(self._fill, matchers, bitmask)
        else:
            pending.fill_s = self._fill(matchers, bitmask)
        return pending

    def _fill(self, matchers: list[llguidance.LLMatcher], bitmask: torch.Tensor) -> float:
        started = time.perf_counter()
        nbytes = self.words * 4
        for index, matcher in enumerate(matchers):
            matcher.unsafe_compute_mask_ptr(bitmask[index].data_ptr(), nbytes)
        return time.perf_counter() - started

    @torch.inference_mode()  # the runner's logits are inference tensors
    def apply(self, pending: PendingMasks | None, logits: torch.Tensor) -> None:
        """Mask ``logits`` (num_sampling, >= vocab) in place on ``pending``'s rows."""
        if pending is None:
            return
        waited = time.perf_counter()
        fill_s = pending.future.result() if pending.future is not None else pending.fill_s
        started = time.perf_counter()
        allowed = unpack_bitmask(pending.bitmask, logits.shape[1])
        if logits.device.type == "cpu" and logits.dtype == torch.float32:
            # numpy, one row at a time: no torch intra-op threads to wake, nothing copied.
            values = logits.numpy()
            for index, row in enumerate(pending.rows):
                np.copyto(values[row], -np.inf, where=allowed[index] == 0)
        else:
            rows = torch.tensor(pending.rows, device=logits.device)
            blocked = torch.from_numpy(allowed == 0).to(logits.device, non_blocking=True)
            masked = logits.index_select(0, rows).masked_fill(blocked, -torch.inf)
            logits.index_put_((rows,), masked)
        stats = self.stats
        stats.steps += 1
        stats.rows += len(pending.rows)
        stats.fill_s += fill_s
        stats.wait_s += started - waited
        stats.apply_s += time.perf_counter() - started

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)


def unpack_bitmask(bitmask: torch.Tensor, width: int) -> npt.NDArray[np.uint8]:
    """(rows, words) int32 bit words -> (rows, width) uint8, 1 where the token is allowed;
    columns past the words' bits (padded vocabulary) are 0.

    Bit ``t % 32`` of word ``t // 32`` is bit ``t % 8`` of byte ``t // 8`` of the words
    written little-endian, so numpy's little-order unpackbits gives the tokens in order.
    """
    rows, words = bitmask.shape
    as_bytes = bitmask.numpy().astype("<i4", copy=False).view(np.uint8)
    bits = np.unpackbits(as_bytes, axis=1, bitorder="little")
    if width <= words * 32:
        return bits[:, :width]
    padded = np.zeros((rows, width), dtype=np.uint8)
    padded[:, : words * 32] = bits
    return padded
