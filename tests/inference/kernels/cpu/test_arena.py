"""A recording's scratch laid out again in one buffer (inference/kernels/cpu/arena.py):
replays still compute what the pass computed, in less memory, and no two tensors whose
calls overlap share a byte."""

from __future__ import annotations

import random

import pytest
import torch

from inference.kernels.cpu.arena import ALIGN, _place, _Span, compact
from inference.kernels.cpu.layers import CpuLayerKernels
from inference.kernels.cpu.recording import record


def test_a_compacted_chain_of_kernels_and_ops_replays_the_pass(kernels: CpuLayerKernels) -> None:
    """Twelve layers of norm, matmul, SiLU-and-multiply and a residual add: each layer's
    tensors are dead by the next, so the buffer holds about one layer's, and every replay
    on new inputs gives what the eager pass gives."""
    x, weight = torch.randn(5, 64), torch.rand(64) + 0.5
    up, down = torch.randn(64, 256) / 8, torch.randn(128, 64) / 8

    def the_pass() -> torch.Tensor:
        h = x
        for _ in range(12):
            y = kernels.rms_norm(h, weight, 1e-6)
            z = kernels.silu_and_mul(y @ up)
            h = (z @ down).view(5, 64) + h
        return kernels.rms_norm(h, weight, 1e-6)

    with record() as recording:
        out = the_pass()
    assert recording.usable
    before = recording.scratch_bytes
    (moved,) = compact(recording, [out])
    assert recording.scratch_bytes < before / 4
    assert moved.shape == out.shape and moved.data_ptr() != out.data_ptr()
    for _ in range(3):
        x.copy_(torch.randn(5, 64))
        recording.replay()
        assert torch.equal(moved, the_pass())


def test_a_result_lives_to_the_end_and_views_keep_their_offsets(
    kernels: CpuLayerKernels,
) -> None:
    """The first norm's output is a result: later tensors must not land on it. A view
    that starts inside a storage points at the same place in the buffer."""
    x, weight = torch.randn(4, 32), torch.rand(32) + 0.5

    def the_pass() -> tuple[torch.Tensor, torch.Tensor]:
        first = kernels.rms_norm(x, weight, 1e-6)
        h = first
        for _ in range(6):
            h = kernels.rms_norm(h * 2 + 1, weight, 1e-6)
        return first, h[1:, 8:]

    with record() as recording:
        first, tail = the_pass()
    moved_first, moved_tail = compact(recording, [first, tail])
    assert moved_tail.stride() == tail.stride()
    x.copy_(torch.randn(4, 32))
    recording.replay()
    want_first, want_tail = the_pass()
    assert torch.equal(moved_first, want_first) and torch.equal(moved_tail, want_tail)


def test_a_result_the_pass_did_not_allocate_is_refused(kernels: CpuLayerKernels) -> None:
    x, weight = torch.randn(2, 32), torch.ones(32)
    with record() as recording:
        kernels.rms_norm(x, weight, 1e-6)
    with pytest.raises(ValueError, match="the recorded pass allocated"):
        compact(recording, [x])


def test_placement_never_overlaps_live_spans() -> None:
    rng = random.Random(7)
    for _ in range(50):
        spans = []
        for _ in range(rng.randint(1, 40)):
            first = rng.randint(0, 60)
            spans.append(_Span(0, rng.randint(1, 5000), first, first + rng.randint(0, 8)))
        size = _place(spans)
        assert size >= max(s.nbytes for s in spans)
        for i, a in enumerate(spans):
            assert a.offset % ALIGN == 0 and a.offset + a.nbytes <= size
            for b in spans[i + 1 :]:
                live_together = a.first <= b.last and b.first <= a.last
                apart = a.offset + a.nbytes <= b.offset or b.offset + b.nbytes <= a.offset
                assert apart or not live_together
