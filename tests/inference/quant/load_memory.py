"""Process memory of `load_model` on one checkpoint, one fresh process per quantization.

Each process opens a GGUF file first (its tokenizer and metadata, about 47 MB whichever way
it loads; a Hugging Face directory is opened by the load itself), then reads
/proc/self/status around the load: ``peak`` is the growth of the high-water mark (reset
just before the load through /proc/self/clear_refs), ``held`` what dropping the model gives
back afterwards. (The growth from before the load to after it reads about 45 MB lower for
a GGUF file: the load's trimming also returns pages freed before it started.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys
    from inference.model.loader import load_model
    from inference.model.loader.gguf import read_gguf
    from inference.model.loader.memory import release_freed_memory
    from inference.model.quant import apply, group_apply  # noqa: F401 (imported first)

    from inference.bench.machine import process_status_bytes as status

    path, quantization = sys.argv[1], sys.argv[2] or None
    kept = quantization in ("gguf", "fp8")
    gguf = read_gguf(path, keep_quantized=kept) if path.endswith(".gguf") else None
    release_freed_memory()
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # the high-water mark starts again from here
    before = status("VmRSS")
    model, _ = load_model(
        path, dtype="bfloat16", progress=False, gguf=gguf, quantization=quantization
    )
    peak, loaded = status("VmHWM") - before, status("VmRSS")
    weights = sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()])
    del model
    release_freed_memory()
    held = loaded - status("VmRSS")  # what letting go of the model gives back
    print(json.dumps({"peak": peak, "held": held, "weights": weights}))
    """
)


def measure_loads(path: Path, quantizations: dict[str, str]) -> dict[str, dict[str, int]]:
    """name -> {peak, held, weights} in bytes; ``quantizations``: name -> the setting
    ("" for none). The processes run one after the other, so they do not share the
    machine's memory while measured."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    measured = {}
    for name, quantization in quantizations.items():
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(path), quantization],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        assert run.returncode == 0, (name, run.stderr[-2000:])
        measured[name] = json.loads(run.stdout.strip().splitlines()[-1])
    return measured


def describe(measured: dict[str, dict[str, int]]) -> str:
    return "; ".join(
        f"{name}: peak {m['peak'] / 1e6:.1f} MB, held {m['held'] / 1e6:.1f} MB, "
        f"weights {m['weights'] / 1e6:.1f} MB"
        for name, m in measured.items()
    )
