"""Record a forward pass's kernel calls, to replay them later without the Python around them.

A batch-1 decode step on the CPU is some 300 calls of the C kernels in this package (and,
for a model whose weights are not group-quantized, a matmul through oneDNN for each
projection), each microseconds of arithmetic, and around them several times that in
Python: nn.Module calls, shape checks, ``torch.empty`` for each output. `record` runs a
forward pass once while noting, in order, every C kernel call (the ctypes function and its
arguments, pointers included) and every torch op that computes (a dispatch mode sees them);
`Recording.replay` calls the same kernels on the same addresses (each run of them in one
call of replay.c, which calls them from C) and reruns the same ops on the same tensors,
copying each op's result into the tensor it returned the first time, so the ops after it
read it where they read it then.

Allowed as they are: allocations (kept alive with the recording, so their addresses stay
the pass's scratch space) and views that share their input's storage (``reshape`` may
copy: that is an op to rerun). A recording is unusable (`Recording.refused` says why) where
the pass did what a replay cannot repeat: an op whose result is not a tensor (``.item()``,
a comparison read by Python: the pass branched on data), one that makes a tensor from
Python values alone (``torch.tensor(list)``, ``arange(n)``: those values were the step's),
a random op, or more scratch than it was allowed (`MAX_SCRATCH_BYTES` by default). The
pass itself always runs to the end, and its result is the real one either way.

What the recording reads from outside (the pass's inputs, the KV pools, the weights) must
stay at the same addresses and be overwritten in place between replays, and the Python
around the kernels must not branch on a step's values that are not in those tensors;
inference/engine/cpu_graphs.py keeps to both.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

KernelCall = tuple[Callable[..., Any], tuple[Any, ...]]

# The kernels replay.c calls itself, by name: its kind and its parameters' pattern (p a
# pointer, q int64, i int, f float; a test holds it to build.py's SIGNATURES). A run of
# these in a recording replays in one call from Python; any other call goes through ctypes.
REPLAY_KINDS: dict[str, tuple[int, str]] = {
    "rms_norm": (0, "pqppqifii"),
    "add_rms_norm": (1, "pqpppqifii"),
    "silu_and_mul": (2, "pqpqiii"),
    "rotary": (3, "pqpppqiiii"),
    "store_kv": (4, "pqpqippipqiqffi"),
    "paged_decode_attention": (5, "pqpqipppipqpqiiiifffqppi"),
    "quant_linear": (6, "pqiqpppqiiipi"),
    "quant_linear_q8": (6, "pqiqpppqiiipi"),
    "quant_linear_q8_il": (6, "pqiqpppqiiipi"),
}
MAX_INTS, MAX_FLOATS = 24, 4  # replay.c's kernel_call


class _ReplayedCall(ctypes.Structure):
    _fields_ = [
        ("fn", ctypes.c_void_p),
        ("kind", ctypes.c_int64),
        ("i", ctypes.c_int64 * MAX_INTS),
        ("f", ctypes.c_float * MAX_FLOATS),
    ]


# A recording keeps every tensor its pass allocated: a pass that allocates more than this
# (by default; a quantized layer's fallback dequantizing its whole weight, say) is not
# worth keeping.
MAX_SCRATCH_BYTES = 256 << 20


class _Active(threading.local):
    calls: list[KernelCall] | None = None  # this thread's recording in progress, if any


# Per thread, as torch's dispatch modes are: an engine stepping in another thread of the
# same process (a test's second engine) neither lands in a recording nor disturbs it.
_active = _Active()

log = logging.getLogger("inference.kernels")

# Allocations a recorded pass may make (their memory is the pass's scratch space).
_ALLOCATIONS = {
    torch.ops.aten.empty.memory_format,
    torch.ops.aten.empty_like.default,
    torch.ops.aten.empty_strided.default,
}

# How torch.tensor, as_tensor and from_numpy bring Python's (or numpy's) values in.
_FROM_PYTHON = {torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default}


def recordable(function: Any) -> Callable[..., Any]:
    """``function`` (a ctypes function of a kernel library) as build.py hands it out: called
    as before, and noted while a `record` is in progress."""

    def call(*args: Any) -> Any:
        calls = _active.calls
        if calls is not None:
            calls.append((function, args))
        return function(*args)

    call.__name__ = call.__qualname__ = getattr(function, "__name__", "kernel")
    call.__wrapped__ = function  # type: ignore[attr-defined]
    return call


class Recording:
    """The kernel calls and torch ops of one pass, in order, and what they need kept alive."""

    def __init__(self, max_scratch_bytes: int = MAX_SCRATCH_BYTES) -> None:
        self.calls: list[KernelCall] = []
        self.max_scratch_bytes = max_scratch_bytes
        self.refused: str | None = None  # why a replay would not repeat the pass
        self.scratch: list[torch.Tensor] = []  # every tensor the pass allocated or computed
        self.scratch_bytes = 0
        self.torch_ops = 0  # of the calls, how many rerun a torch op
        self._program: list[Callable[[], None]] | None = None  # `replay`'s, made at its first

    @property
    def usable(self) -> bool:
        return self.refused is None and bool(self.calls)

    def refuse(self, reason: str) -> None:
        if self.refused is None:
            self.refused = reason

    def check_scratch(self) -> None:
        if self.scratch_bytes > self.max_scratch_bytes:
            self.refuse(f"the pass allocates over {self.max_scratch_bytes / 2**20:g} MiB")

    def replay(self) -> None:
        """Call every recorded kernel and op again, in order; RuntimeError if a kernel
        reports a failure (the kernels return 0 on success, the layer kernels nothing)."""
        if self._program is None:
            self._program = _compile(self.calls)
        for step in self._program:
            step()


def _compile(calls: list[KernelCall]) -> list[Callable[[], None]]:
    """The calls as `replay` makes them: each run of kernels replay.c knows as one call of
    it (when it builds), everything else one by one."""
    replay_calls = _replay_library()
    program: list[Callable[[], None]] = []
    run: list[KernelCall] = []
    for call in calls:
        name = getattr(call[0], "__name__", "")
        if replay_calls is not None and name in REPLAY_KINDS:
            run.append(call)
            continue
        if run:
            program.append(_batched(replay_calls, run))
            run = []
        program.append(partial(_call, *call))
    if run:
        program.append(_batched(replay_calls, run))
    return program


def _call(function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    status = function(*args)
    if status:
        name = getattr(function, "__name__", "kernel")
        raise RuntimeError(f"replayed kernel {name} failed with status {status}")


def _batched(replay_calls: Any, run: list[KernelCall]) -> Callable[[], None]:
    """One call of replay.c for ``run``: the calls packed as its kernel_call structs."""
    packed = (_ReplayedCall * len(run))()
    names = []
    function: Any
    for slot, (function, args) in zip(packed, run, strict=True):
        name = function.__name__
        kind, pattern = REPLAY_KINDS[name]
        if len(args) != len(pattern):
            raise ValueError(f"{name} was called with {len(args)} arguments, not {len(pattern)}")
        slot.fn = ctypes.cast(function, ctypes.c_void_p).value
        slot.kind = kind
        ints = [int(a or 0) for a, p in zip(args, pattern, strict=True) if p != "f"]
        floats = [float(a) for a, p in zip(args, pattern, strict=True) if p == "f"]
        slot.i[: len(ints)] = ints
        slot.f[: len(floats)] = floats
        names.append(name)
    address, count = ctypes.addressof(packed), len(run)

    def replay_run() -> None:
        failed = replay_calls(address, count)
        if failed:
            raise RuntimeError(f"replayed kernel {names[failed - 1]} failed")

    replay_run.packed = packed  # type: ignore[attr-defined]  # the structs live as long
    return replay_run


def _replay_library() -> Any:
    """replay.c's ``replay_calls`` (unwrapped: replays are not recorded), or None where it
    does not build (the calls then go one by one through ctypes)."""
    from inference.kernels.cpu.build import KernelBuildError, load_library

    try:
        function = load_library("replay").replay_calls
    except KernelBuildError as error:
        log.warning("replaying recorded kernel calls one by one: %s", error)
        return None
    return getattr(function, "__wrapped__", function)


def rerun(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
    """Run a recorded torch op again and put its result where the first run's went."""
    result = func(*args, **kwargs)
    if isinstance(out, torch.Tensor):
        if result is not out:  # an in-place op (or out=) has written there already
            out.copy_(result)
        return
    for target, value in zip(out, result, strict=True):
        if value is not target:
            target.copy_(value)


class _Watch(TorchDispatchMode):
    """Sorts each torch op of the pass: an allocation (kept), a view (nothing to do), an op
    to rerun (noted in order among the kernel calls), or one a replay cannot repeat."""

    def __init__(self, recording: Recording) -> None:
        super().__init__()
        self.recording = recording

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Not wrapped in torch's dynamo guard: the wrapper imports torch._dynamo on its
        first call, 1.1-1.6 s in the middle of serving (the first recording step), and no
        pass under the recorder is compiled. Read by TorchDispatchMode.__init_subclass__."""
        return False

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        recording = self.recording
        if func in _ALLOCATIONS:
            recording.scratch.append(out)
            recording.scratch_bytes += out.untyped_storage().nbytes()
            recording.check_scratch()
            return out
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = out if isinstance(out, (list, tuple)) else (out,)
        if func in _FROM_PYTHON:  # (an alias of its input, the values made in Python)
            recording.refuse(f"{func} made a tensor from Python values")
            return out
        if getattr(func, "is_view", False) and inputs and _aliases(outs, inputs[0]):
            return out
        if not all(isinstance(o, torch.Tensor) for o in outs):
            recording.refuse(f"{func} gave Python a value")
        elif not inputs:
            recording.refuse(f"{func} made a tensor from Python values")
        elif torch.Tag.nondeterministic_seeded in getattr(func, "tags", ()):
            recording.refuse(f"{func} is random")
        else:
            recording.calls.append((partial(rerun, func, args, kwargs, out), ()))
            recording.torch_ops += 1
            # Its own memory (an op may also hand back an input, or a view of one).
            fresh = [o for o in outs if not any(_aliases((o,), i) for i in inputs)]
            recording.scratch.extend(fresh)
            recording.scratch_bytes += sum(o.untyped_storage().nbytes() for o in fresh)
        recording.check_scratch()
        return out


def _aliases(outs: tuple[Any, ...] | list[Any], base: torch.Tensor) -> bool:
    """Whether every one of ``outs`` shares ``base``'s storage (never for an opaque tensor,
    such as a weight prepacked for oneDNN, which has none)."""
    if base.layout != torch.strided:
        return False
    storage = base.untyped_storage().data_ptr()
    return all(
        isinstance(o, torch.Tensor)
        and o.layout == torch.strided
        and o.untyped_storage().data_ptr() == storage
        for o in outs
    )


@contextmanager
def record(max_scratch_bytes: int = MAX_SCRATCH_BYTES) -> Iterator[Recording]:
    """Note every kernel call and torch op of the code run inside (see the module)."""
    if _active.calls is not None:
        raise RuntimeError("a recording is already in progress")
    recording = Recording(max_scratch_bytes)
    _active.calls = recording.calls
    try:
        with _Watch(recording):
            yield recording
    finally:
        _active.calls = None
