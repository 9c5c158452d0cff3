"""Process memory of `load_model` on one checkpoint, one fresh process per quantization
(`python -m inference bench load-memory`; the memory tests in tests/inference/quant/).

Each process opens a GGUF file first (its tokenizer and metadata, about 47 MB whichever way
it loads; a Hugging Face directory is opened by the load itself), then reads
/proc/self/status around the load: ``peak`` is the growth of the high-water mark (reset
just before the load through /proc/self/clear_refs), ``held`` what dropping the model gives
back afterwards. (The growth from before the load to after it reads about 45 MB lower for
a GGUF file: the load's trimming also returns pages freed before it started.)

The process then drops that model and loads it again: ``warm_peak`` and ``warm_held``. A
first load also pays for what a process does once: the library code its kernels run paged
in from disk (``paged_in``: the growth of the file-backed pages over the load), the
allocator's and thread pools' first growth. The second pays only for the load itself, so
its peak minus held is the load's own working memory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from inference.bench.machine import cpu_model

REPO_ROOT = Path(__file__).resolve().parents[2]

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


    def one_load():
        gguf = read_gguf(path, keep_quantized=kept) if path.endswith(".gguf") else None
        release_freed_memory()
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # the high-water mark starts again from here
        before, files = status("VmRSS"), status("RssFile")
        model, _ = load_model(
            path, dtype="bfloat16", progress=False, gguf=gguf, quantization=quantization
        )
        peak, loaded = status("VmHWM") - before, status("VmRSS")
        paged_in = status("RssFile") - files  # code (and file pages) still mapped
        tensors = [*model.parameters(), *model.buffers()]
        weights = sum(t.numel() * t.element_size() for t in tensors)
        del model, tensors
        release_freed_memory()
        held = loaded - status("VmRSS")  # what letting go of the model gives back
        del gguf  # the file's reader and tokenizer: opened again for the next load
        release_freed_memory()
        return peak, held, weights, paged_in


    peak, held, weights, paged_in = one_load()
    warm_peak, warm_held, _, warm_paged_in = one_load()
    print(json.dumps({"peak": peak, "held": held, "weights": weights, "paged_in": paged_in,
                      "warm_peak": warm_peak, "warm_held": warm_held,
                      "warm_paged_in": warm_paged_in}))
    """
)


def measure_loads(path: Path, quantizations: dict[str, str]) -> dict[str, dict[str, int]]:
    """name -> {peak, held, weights, paged_in, warm_...} in bytes; ``quantizations``:
    name -> the setting ("" for none). The processes run one after the other, so they do
    not share the machine's memory while measured."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    measured = {}
    for name, quantization in quantizations.items():
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(path), quantization],
            capture_output=True, text=True, env=env, timeout=600,
        )  # fmt: skip
        if run.returncode != 0:
            raise RuntimeError(f"measuring {name} failed: {run.stderr[-2000:]}")
        measured[name] = json.loads(run.stdout.strip().splitlines()[-1])
    return measured


def describe(measured: dict[str, dict[str, int]]) -> str:
    return "; ".join(
        f"{name}: peak {m['peak'] / 1e6:.1f} MB, held {m['held'] / 1e6:.1f} MB, "
        f"weights {m['weights'] / 1e6:.1f} MB, warm peak {m['warm_peak'] / 1e6:.1f} MB"
        for name, m in measured.items()
    )


def write_bf16_directory(gguf_path: Path, directory: Path) -> Path:
    """The GGUF file's model as a bf16 Hugging Face directory (config.json and one
    safetensors file): the source of a bf16 -> FP8 load."""
    import torch
    from safetensors.torch import save_file

    from inference.model.loader.gguf import read_gguf

    checkpoint = read_gguf(gguf_path)
    tensors = {}
    for name, tensor in checkpoint.tensors:
        if not isinstance(tensor, torch.Tensor):  # read without keep_quantized: never
            raise ValueError(f"{name} came quantized")
        tensors[name] = tensor.to(torch.bfloat16)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(checkpoint.hf_config))
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    return directory


def largest_source_tensor_bytes(path: Path) -> int:
    """The bytes of a GGUF file's largest tensor as stored: the issue's bound on what a
    load may hold beyond its model."""
    from inference.model.loader.gguf import PlainArrayReader

    return max(int(tensor.n_bytes) for tensor in PlainArrayReader(path).tensors)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a .gguf file")
    parser.add_argument("--output", help="also write the JSON to this file")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    path = Path(args.model)
    if path.suffix != ".gguf" or not path.is_file():
        raise ValueError(f"--model must be a .gguf file, got {args.model!r}")
    rows: dict[str, Any] = {}
    for source, measured in _measure_all(path).items():
        for name, m in measured.items():
            rows[f"{source} as {name}"] = {
                **{key: round(value / 1e6, 3) for key, value in m.items()},
                "first_extra_mb": round((m["peak"] - m["held"]) / 1e6, 3),
                "warm_extra_mb": round((m["warm_peak"] - m["warm_held"]) / 1e6, 3),
            }
    result = {
        "benchmark": "load-memory",
        "model": path.name,
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "units": "MB (1e6 bytes); extra = peak - held",
        "largest_gguf_tensor_mb": round(largest_source_tensor_bytes(path) / 1e6, 3),
        "rows": rows,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")
    return 0


def _measure_all(path: Path) -> dict[str, dict[str, dict[str, int]]]:
    loads = {"gguf": measure_loads(path, {"bf16": "", "gguf": "gguf", "fp8": "fp8"})}
    with tempfile.TemporaryDirectory() as scratch:
        directory = write_bf16_directory(path, Path(scratch) / "bf16")
        loads["bf16 directory"] = measure_loads(directory, {"bf16": "", "fp8": "fp8"})
    return loads
