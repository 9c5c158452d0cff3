"""The int8-activation kernel (quant_linear_q8.c) of this checkout against another
checkout's, on SmolLM2's shapes: JSON on stdout.

Both sources are built with the engine's flags for this processor and loaded into one
process; for each shape and number of rows of x the two take turns in short bursts
(``--bursts`` of them, the order flipped every burst), so a busy neighbour on a shared
machine slows both alike. Each reports the best and the median burst, microseconds a
call, and the outputs are checked to agree (the same arithmetic up to the order of float
additions).

    git worktree add /tmp/base <commit>
    PYTHONPATH=. .venv/bin/python scripts/bench_quant_int8_ab.py /tmp/base --threads 2
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from inference.bench.machine import cpu_model  # noqa: E402 (after the path)
from inference.kernels.cpu import build  # noqa: E402
from inference.model.quant.group_math import GroupQuantized, quantize_groups  # noqa: E402

SOURCE = Path("inference/kernels/cpu/quant_linear_q8.c")
# (name, rows, cols, bits): SmolLM2-135M Q4_1's linears and its 8-bit tied vocabulary.
SHAPES = [
    ("qkv", 960, 576, 4),
    ("o", 576, 576, 4),
    ("gate_up", 3072, 576, 4),
    ("down", 576, 1536, 4),
    ("vocab", 49152, 576, 8),
]


def built(checkout: Path, workdir: Path) -> ctypes.CDLL:
    """quant_linear_q8.c of `checkout`, compiled as the engine compiles it here."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise SystemExit("no C compiler (cc or gcc) on PATH")
    flags = (*build.FLAGS, *build.SOURCE_FLAGS["quant_linear_q8"])
    target = workdir / checkout.resolve().name
    target.mkdir()
    library = build._compile(compiler, flags, checkout / SOURCE, target)
    return build._declare("quant_linear_q8", build._load(library))


def call(
    lib: ctypes.CDLL, x: torch.Tensor, w: GroupQuantized, out: torch.Tensor, threads: int
) -> Callable[[], object]:
    function = lib.quant_linear_q8
    arguments = (x.data_ptr(), x.stride(0), 0, x.shape[0], w.codes.data_ptr(),
                 w.scale.data_ptr(), w.offset.data_ptr(), w.rows, w.cols, w.bits,
                 w.group_size, out.data_ptr(), threads)  # fmt: skip
    return lambda: function(*arguments)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("baseline", type=Path, help="the other checkout (a git worktree)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--bursts", type=int, default=41)
    args = parser.parse_args()
    if not (args.baseline / SOURCE).is_file():
        raise SystemExit(f"{args.baseline / SOURCE} not found")
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        libs = {"baseline": built(args.baseline, Path(tmp)), "this": built(REPO, Path(tmp))}
        results: dict[str, dict[str, object]] = {}
        for name, rows, cols, bits in SHAPES:
            weight = quantize_groups(torch.randn(rows, cols), bits, 32)
            for m in args.rows:
                x = torch.randn(m, cols)
                outs = {key: torch.empty(m, rows) for key in libs}
                calls = {key: call(lib, x, weight, outs[key], args.threads)
                         for key, lib in libs.items()}  # fmt: skip
                per_burst = max(1, 30_000 // rows)  # about the same time a burst
                times: dict[str, list[float]] = {key: [] for key in libs}
                for burst in range(args.bursts):
                    for key in sorted(libs, reverse=burst % 2 == 1):
                        start = time.perf_counter()
                        for _ in range(per_burst):
                            calls[key]()
                        times[key].append((time.perf_counter() - start) / per_burst * 1e6)
                scale = outs["baseline"].abs().max().item()
                if not torch.allclose(outs["this"], outs["baseline"], rtol=1e-4, atol=1e-4 * scale):
                    raise SystemExit(f"{name} at {m} rows: the two builds disagree")
                entry: dict[str, object] = {
                    key: {"best_us": round(min(t), 1), "median_us": round(statistics.median(t), 1)}
                    for key, t in times.items()
                }
                entry["median_ratio"] = round(
                    statistics.median(times["this"]) / statistics.median(times["baseline"]), 3
                )
                results[f"{name} {rows}x{cols} {bits}-bit, {m} rows"] = entry
    report = {"benchmark": "int8 kernel, this checkout against a baseline",
              "cpu": cpu_model(), "threads": args.threads, "bursts": args.bursts,
              "results": results}  # fmt: skip
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
