"""Where one engine step's time goes, measured from outside the engine.

`StepTimer.attach(engine)` wraps a few of the engine's calls on that instance only (the
scheduler's `schedule` and `update_after_step`, the runner's `execute`, the model's
`compute_logits`, the engine's `_sample`) and puts forward hooks on every module of the
model, so that a step splits into:

- ``schedule``: choosing the batch and recording its progress after;
- ``inputs``: building the step's host inputs and attention metadata (`execute` less the
  model's forward and the logits);
- ``forward``: the model, split further by module (below);
- ``logits``: the output projection of the sampled rows;
- ``sample``: the sampler (and speculative verification);
- ``post``: the rest of the step (appending tokens, detokenizing, stop strings, outputs).

Module times are *exclusive*: a decoder layer's own time is what its children did not
take (the residual adds), the attention module's is rotary, the KV write and the
attention kernel (its projections are children). Names have the layer index replaced by
``*``, so ``model.layers.*.mlp.down_proj`` sums over all layers.

The hooks cost a few microseconds per module per step: the profile reports the step time
measured without them too. The times are host wall-clock: exact on a CPU, where every
kernel runs synchronously; on CUDA the hooks synchronize, which changes what they measure.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

_INDEX = re.compile(r"\.\d+(?=\.|$)")
ROOT = "(model)"  # the top-level call; its own time: the rotary tables and the layer loop


class StepTimer:
    def __init__(self) -> None:
        self.phases: dict[str, float] = defaultdict(float)
        self.modules: dict[str, float] = defaultdict(float)
        self.enabled = False
        self._stack: list[list[float]] = []  # [start, children's time] per open module
        self._handles: list[Any] = []
        self._sync: Callable[[], None] = lambda: None

    def reset(self) -> None:
        self.phases.clear()
        self.modules.clear()

    def attach(self, engine: Any) -> None:
        """Instrument ``engine`` (an LLMEngine); `detach` undoes it."""
        runner, scheduler = engine.runner, engine.scheduler
        if runner.device.type == "cuda":
            self._sync = torch.cuda.synchronize
        self._wrap(scheduler, "schedule", "schedule")
        self._wrap(scheduler, "update_after_step", "schedule")
        self._wrap(runner, "execute", "execute")
        self._wrap(runner.model, "compute_logits", "logits")
        self._wrap(engine, "_sample", "sample")
        for name, module in runner.model.named_modules():
            key = _INDEX.sub(".*", name) or ROOT
            self._handles.append(module.register_forward_pre_hook(self._enter))
            self._handles.append(module.register_forward_hook(self._exit(key)))
        self._targets = [scheduler, runner, runner.model, engine]

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for target in self._targets:
            for name in ("schedule", "update_after_step", "execute", "compute_logits", "_sample"):
                target.__dict__.pop(name, None)

    def _wrap(self, target: Any, name: str, phase: str) -> None:
        inner = getattr(target, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.enabled:
                return inner(*args, **kwargs)
            self._sync()
            started = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self._sync()
                self.phases[phase] += time.perf_counter() - started

        setattr(target, name, timed)

    def _enter(self, module: nn.Module, args: Any) -> None:
        if self.enabled:
            self._sync()
            self._stack.append([time.perf_counter(), 0.0])

    def _exit(self, key: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            if not self.enabled or not self._stack:
                return
            self._sync()
            started, children = self._stack.pop()
            elapsed = time.perf_counter() - started
            self.modules[key] += elapsed - children
            if self._stack:
                self._stack[-1][1] += elapsed
            elif key == ROOT:  # (an lm_head called by compute_logits is counted there)
                self.phases["forward"] += elapsed

        return hook

    def split(self, step_s: float) -> dict[str, float]:
        """The phases of ``step_s`` seconds of steps, in seconds; ``inputs`` and ``post`` are
        what the measured calls leave over."""
        phases = dict(self.phases)
        execute = phases.pop("execute", 0.0)
        forward, logits = phases.get("forward", 0.0), phases.get("logits", 0.0)
        phases["inputs"] = max(0.0, execute - forward - logits)
        phases["post"] = max(0.0, step_s - execute - phases.get("schedule", 0.0))
        phases["post"] = max(0.0, phases["post"] - phases.get("sample", 0.0))
        return phases
