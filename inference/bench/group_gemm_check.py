"""The group-quantized Triton matmul on one device: correctness, then speed against torch.

Part of `scripts/gpu_check.sh`; alone, ``python -m inference.bench.group_gemm_check``
prints the same results as JSON (``--device cpu`` runs the correctness cases under
triton's interpreter, untimed). The CPU tests (tests/inference/kernels/triton/) check the
interpreted kernel; here the compiled one (tensor-core dots, the GPU's own rounding) is
compared with the float32 product of the weight rounded to the activations' dtype, and
timed on the demo model's layer shapes (SmolLM2-135M: q|k|v 960x576, gate|up 3072x576,
down 576x1536, the vocabulary 49152x576) against:

- ``torch_dequant``: `dequantize` then ``F.linear``, the path CUDA took before the kernel;
- ``bf16_linear``: ``F.linear`` on the weight already in bf16, what an unquantized layer
  costs, reading 3.6x (4-bit) or 1.9x (8-bit) the bytes;
- ``triton_no_split``: the kernel with K whole, to show what split-K buys at 1-16 rows.

Timings are triton's ``do_bench`` medians (L2 flushed between runs, as a decode step's
other layers would), in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import torch
import torch.nn.functional as F

from inference.model.quant.group_math import GroupQuantized, dequantize, pack_codes

SMOLLM2_SHAPES = ((960, 576), (3072, 576), (576, 1536), (49152, 576))
TIMED_TOKENS = (1, 16, 64, 512)
# Error over the largest output magnitude: bf16 outputs are rounded once (2**-8) and
# products summed in another order than the float32 reference.
TOLERANCE = 1e-2


def random_weight(
    rows: int, cols: int, bits: int, group_size: int, device: torch.device, seed: int
) -> GroupQuantized:
    """Random codes, float16 scales and symmetric offsets: weights within about +-0.1."""
    gen = torch.Generator().manual_seed(seed)
    groups = -(-cols // group_size)
    codes = torch.randint(0, 1 << bits, (rows, cols), generator=gen, dtype=torch.uint8)
    scale = (torch.rand(rows, groups, generator=gen) * 0.01 + 0.001) * 16 / (1 << bits)
    offset = -scale * (1 << (bits - 1))
    return GroupQuantized(
        pack_codes(codes, bits).to(device),
        scale.half().to(device),
        offset.half().to(device),
        bits, group_size, cols,
    )  # fmt: skip


def check_case(
    device: torch.device,
    *,
    tokens: int,
    rows: int,
    cols: int,
    bits: int,
    group_size: int,
    dtype: torch.dtype = torch.bfloat16,
) -> dict[str, Any]:
    """The kernel and the torch path against the float32 product of the rounded weight."""
    from inference.kernels.triton.group_gemm import group_quant_matmul

    weight = random_weight(rows, cols, bits, group_size, device, seed=tokens + rows + cols)
    gen = torch.Generator().manual_seed(tokens)
    x = torch.randn(tokens, cols, generator=gen).to(device, dtype)
    exact = x.float() @ dequantize(weight, dtype).float().T
    scale = exact.abs().max().clamp_min(1e-6)
    actual = group_quant_matmul(x, weight).float()
    torch_path = F.linear(x, dequantize(weight, dtype)).float()
    error = float((actual - exact).abs().max() / scale)
    return {
        "case": f"{bits}-bit {rows}x{cols} g={group_size} {str(dtype).removeprefix('torch.')}",
        "tokens": tokens,
        "rel_error": round(error, 6),
        "torch_rel_error": round(float((torch_path - exact).abs().max() / scale), 6),
        "ok": error < TOLERANCE,
    }


def time_case(
    device: torch.device, *, tokens: int, rows: int, cols: int, bits: int, group_size: int
) -> dict[str, Any]:
    """Microseconds per call for the kernel and the torch paths, bf16 activations."""
    from triton.testing import do_bench

    from inference.kernels.triton.group_gemm import group_quant_matmul

    weight = random_weight(rows, cols, bits, group_size, device, seed=rows)
    x = torch.randn(tokens, cols, device=device).bfloat16()
    dense = dequantize(weight, torch.bfloat16)
    runs = {
        "triton": lambda: group_quant_matmul(x, weight),
        "torch_dequant": lambda: F.linear(x, dequantize(weight, torch.bfloat16)),
        "bf16_linear": lambda: F.linear(x, dense),
    }
    if tokens <= 16:
        runs["triton_no_split"] = lambda: group_quant_matmul(x, weight, split_k=1)
    result: dict[str, Any] = {"shape": f"{rows}x{cols}", "bits": bits, "tokens": tokens}
    for name, run in runs.items():
        result[f"{name}_us"] = round(
            do_bench(run, warmup=10, rep=50, return_mode="median") * 1e3, 2
        )
    quant_bytes = sum(t.numel() * t.element_size() for t in (weight.codes, weight.scale,
                                                               weight.offset))  # fmt: skip
    result["weight_bytes"] = quant_bytes
    result["triton_gb_per_s"] = round(quant_bytes / result["triton_us"] / 1e3, 1)
    result["speedup_vs_torch_dequant"] = round(result["torch_dequant_us"] / result["triton_us"], 2)
    result["speedup_vs_bf16"] = round(result["bf16_linear_us"] / result["triton_us"], 2)
    return result


def run_group_gemm_checks(device: torch.device, *, quick: bool) -> dict[str, Any]:
    """Correctness cases (ragged shapes, 4 and 8 bits, decode and prefill sizes; quick:
    two tiny ones) and, on CUDA, timings of the demo model's shapes."""
    cases: list[dict[str, Any]] = []
    if quick:
        specs = [(3, 40, 200, 4, 32, torch.bfloat16), (17, 40, 200, 8, 64, torch.bfloat16)]
    else:
        specs = [(t, r, c, 4, 32, torch.bfloat16) for r, c in SMOLLM2_SHAPES for t in (1, 64)]
        specs += [
            (1, 49152, 576, 8, 32, torch.bfloat16),  # the demo file's Q8_0 table
            (3, 1000, 200, 4, 128, torch.bfloat16),  # odd K, a ragged group
            (300, 1000, 200, 8, 64, torch.bfloat16),
            (17, 512, 333, 4, 96, torch.bfloat16),
            (5, 960, 576, 4, 32, torch.float16),
            (5, 960, 576, 8, 32, torch.float32),
        ]
    for tokens, rows, cols, bits, group_size, dtype in specs:
        cases.append(
            _guard(check_case, device, tokens=tokens, rows=rows, cols=cols, bits=bits,
                   group_size=group_size, dtype=dtype)
        )  # fmt: skip
    timings: list[dict[str, Any]] = []
    if device.type == "cuda" and not quick:
        for bits in (4, 8):
            for rows, cols in SMOLLM2_SHAPES:
                for tokens in TIMED_TOKENS:
                    timings.append(
                        _guard(time_case, device, tokens=tokens, rows=rows, cols=cols,
                               bits=bits, group_size=32)
                    )  # fmt: skip
    return {"cases": cases, "timings": timings}


def _guard(part: Any, device: torch.device, **case: Any) -> dict[str, Any]:
    """One case's result, or a failed one that names it and the error."""
    try:
        result: dict[str, Any] = part(device, **case)
        return result
    except Exception as error:
        described = ", ".join(f"{k}={v}" for k, v in case.items())
        return {"case": f"{part.__name__}({described})", "ok": False,
                "error": f"{type(error).__name__}: {error}"[:2000]}  # fmt: skip


def print_results(results: dict[str, Any]) -> None:
    print(f"\n{'group-quantized matmul case':<34} {'tokens':>6} {'rel err':>9} {'torch':>9}  ok")
    for c in results["cases"]:
        if "error" in c:
            print(f"{c['case']}: NO, {c['error']}")
            continue
        print(
            f"{c['case']:<34} {c['tokens']:>6} {c['rel_error']:>9.2e} "
            f"{c['torch_rel_error']:>9.2e}  {'yes' if c['ok'] else 'NO'}"
        )
    if results["timings"]:
        print(f"\n{'shape':<12}{'bits':>5}{'tokens':>7}{'triton':>9}{'no split':>9}"
              f"{'dequant':>9}{'bf16':>9}  (us){'GB/s':>8}")  # fmt: skip
    for t in results["timings"]:
        if "error" in t:
            print(f"{t['case']}: {t['error']}")
            continue
        no_split = t.get("triton_no_split_us", float("nan"))
        print(
            f"{t['shape']:<12}{t['bits']:>5}{t['tokens']:>7}{t['triton_us']:>9.1f}"
            f"{no_split:>9.1f}{t['torch_dequant_us']:>9.1f}{t['bf16_linear_us']:>9.1f}"
            f"{t['triton_gb_per_s']:>12.0f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="two tiny cases, untimed")
    args = parser.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU", file=sys.stderr)
        return 2
    quick = args.quick or args.device == "cpu"  # the interpreter is slow
    results = run_group_gemm_checks(torch.device(args.device), quick=quick)
    print(json.dumps(results, indent=2))
    return 0 if all(c["ok"] for c in results["cases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
