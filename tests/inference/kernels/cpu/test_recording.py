"""Recording the C kernels' calls (inference/kernels/cpu/recording.py): what is noted, what
makes a recording unusable, and replays on the recorded addresses."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import threading
from typing import Any

import pytest
import torch

from inference.kernels.cpu.backend import CpuAttentionBackend
from inference.kernels.cpu.build import SIGNATURES, load_kv_store, load_paged_decode
from inference.kernels.cpu.layers import CpuLayerKernels
from inference.kernels.cpu.recording import MAX_FLOATS, MAX_INTS, REPLAY_KINDS, record
from inference.kernels.kv_cache import KVCache


def test_replay_recomputes_from_the_inputs_current_values(kernels: CpuLayerKernels) -> None:
    x, weight = torch.randn(3, 64), torch.rand(64) + 0.5
    with record() as recording:
        out = kernels.rms_norm(x, weight, 1e-6)
        out = out.view(3, 8, 8)[:, 1:].view(3, -1)  # views are allowed
    assert recording.usable and len(recording.calls) == 1
    assert recording.scratch and recording.scratch[0].data_ptr() == out.data_ptr() - 8 * 4
    x.copy_(torch.randn(3, 64))  # a new step's input, in place
    recording.replay()
    want = kernels.rms_norm(x, weight, 1e-6).view(3, 8, 8)[:, 1:].reshape(3, -1)
    assert torch.equal(out, want)


def test_calls_outside_a_recording_are_not_noted(kernels: CpuLayerKernels) -> None:
    x, weight = torch.randn(2, 32), torch.ones(32)
    kernels.rms_norm(x, weight, 1e-6)
    with record() as recording:
        pass
    assert recording.calls == [] and not recording.usable  # nothing to replay


def test_torch_ops_rerun_in_order_among_the_kernel_calls(kernels: CpuLayerKernels) -> None:
    x, weight, matrix = torch.randn(4, 32), torch.rand(32) + 0.5, torch.randn(32, 32)

    def the_pass() -> torch.Tensor:
        y = kernels.rms_norm(x, weight, 1e-6)
        z = y.t().reshape(4, 32) * 2 + x  # a copying reshape, a multiply, an add
        z.add_(1.0)  # in place
        first, second = z.split([16, 16], dim=1)
        w = torch.cat([second, first], dim=1) @ matrix
        return kernels.rms_norm(w, weight, 1e-6)

    with record() as recording:
        out = the_pass()
    assert recording.usable and recording.torch_ops >= 6  # (a reshape may be two ops)
    assert len(recording.calls) == recording.torch_ops + 2
    for _ in range(2):
        x.copy_(torch.randn(4, 32))
        recording.replay()
        assert torch.equal(out, the_pass())


@pytest.mark.parametrize(
    ("torch_op", "reason"),
    [
        (lambda y: float(y.sum()), "gave Python a value"),  # the pass branches on data
        (lambda y: y + torch.tensor([1.0, 2.0]).sum(), "made a tensor from Python values"),
        (lambda y: y + torch.arange(32), "made a tensor from Python values"),
        (lambda y: torch.bernoulli(y.abs() / (1 + y.abs())), "is random"),
        (lambda y: torch.empty(1 << 30, dtype=torch.uint8), "allocates over"),
    ],
    ids=["item", "tensor-from-list", "arange", "random", "scratch"],
)
def test_what_a_replay_cannot_repeat_makes_the_recording_unusable(
    kernels: CpuLayerKernels, torch_op: Any, reason: str
) -> None:
    x, weight = torch.randn(4, 32), torch.ones(32)
    with record() as recording:
        torch_op(kernels.rms_norm(x, weight, 1e-6))
    assert recording.calls and not recording.usable
    assert recording.refused is not None and reason in recording.refused


def test_a_recording_keeps_to_the_scratch_it_was_allowed(kernels: CpuLayerKernels) -> None:
    x, weight = torch.randn(4, 32), torch.ones(32)
    with record(max_scratch_bytes=4 * 32 * 4) as fits:
        kernels.rms_norm(x, weight, 1e-6)  # one (4, 32) float32 output
    with record(max_scratch_bytes=4 * 32 * 4) as over:
        kernels.rms_norm(kernels.rms_norm(x, weight, 1e-6), weight, 1e-6)
    assert fits.usable and fits.scratch_bytes == 512
    assert not over.usable and "the pass allocates over" in (over.refused or "")


def test_another_threads_calls_stay_out_of_a_recording(kernels: CpuLayerKernels) -> None:
    x, weight = torch.randn(2, 32), torch.ones(32)
    with record() as recording:
        other = threading.Thread(target=lambda: kernels.rms_norm(x + 1, weight, 1e-6))
        other.start()
        other.join()
        kernels.rms_norm(x, weight, 1e-6)
    assert len(recording.calls) == 1 and recording.usable  # nor did its add count


def test_recordings_do_not_nest() -> None:
    with record(), pytest.raises(RuntimeError, match="already in progress"), record():
        pass
    with record() as again:  # the failed attempt left nothing behind
        pass
    assert again.calls == []


def test_a_replayed_kernel_that_fails_raises() -> None:
    backend = CpuAttentionBackend(load_paged_decode(), load_kv_store())
    pool = torch.zeros(4, 8, 2, 16)
    cache = KVCache(pool, pool.clone())
    key, value = torch.randn(1, 2, 16), torch.randn(1, 2, 16)
    slots = torch.tensor([5], dtype=torch.int64)
    with record() as recording:
        backend.write_kv(key, value, cache, slots)
    assert recording.usable and torch.equal(cache[0].view(-1, 2, 16)[5], key[0])
    slots[0] = 4 * 8  # past the pool: the kernel refuses it
    with pytest.raises(RuntimeError, match="replayed kernel store_kv failed"):
        recording.replay()


PATTERN = {ctypes.c_void_p: "p", ctypes.c_int64: "q", ctypes.c_int: "i", ctypes.c_float: "f"}


def test_replay_c_takes_each_kernel_as_build_declares_it() -> None:
    """replay.c's prototypes (REPLAY_KINDS' patterns) are build.py's SIGNATURES."""
    declared = {
        name: types for functions in SIGNATURES.values() for name, types in functions.items()
    }
    for name, (_, pattern) in REPLAY_KINDS.items():
        assert "".join(PATTERN[t] for t in declared[name]) == pattern, name
        assert pattern.count("f") <= MAX_FLOATS and len(pattern) - pattern.count("f") <= MAX_INTS


def test_runs_of_kernels_replay_in_one_call_and_the_rest_one_by_one(
    kernels: CpuLayerKernels,
) -> None:
    x, weight = torch.randn(4, 32), torch.ones(32)
    with record() as recording:
        y = kernels.rms_norm(x, weight, 1e-6)
        y = kernels.rms_norm(y, weight, 1e-6)  # a run of two
        kernels.dequantize_fp8(torch.zeros(4, 32, dtype=torch.float8_e4m3fn), None, torch.float32)
        z = y * 2  # a torch op between
        out = kernels.rms_norm(z, weight, 1e-6)
    recording.replay()
    program = recording._program
    assert program is not None and len(program) == 4  # [run of 2], fp8, torch op, [run of 1]
    assert [len(getattr(step, "packed", ())) for step in program] == [2, 0, 0, 1]
    x.copy_(torch.randn(4, 32))
    recording.replay()
    want = kernels.rms_norm(kernels.rms_norm(x, weight, 1e-6), weight, 1e-6) * 2
    assert torch.equal(out, kernels.rms_norm(want, weight, 1e-6))


def test_recording_leaves_torch_dynamo_unimported() -> None:
    """torch wraps a dispatch mode's hook in a guard that imports torch._dynamo on its first
    call (1-1.6 s): a worker's first recording step stalled every user that long."""
    code = (
        "import sys, torch\n"
        "from inference.kernels.cpu.recording import record\n"
        "x = torch.randn(4, 8)\n"
        "with record() as recording:\n"
        "    y = x * 2 + 1\n"
        "assert recording.torch_ops == 2, recording.torch_ops\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "False"
