"""`scripts/gpu_check.sh`: kernel correctness and decode/prefill speed on one GPU.

1. The Triton kernels against the torch path on CUDA (`kernel_check`), then the
   group-quantized matmul's cases and its timings on the demo model's shapes
   (`group_gemm_check`).
2. Per model, for bf16 and fp8 weights: decode output tokens/s at batch 1, 32 and 128, the
   fraction of HBM bandwidth that batch 1 achieves (weight bytes read per step over the
   step time, against 4.3 TB/s, what a device-to-device copy measured on an H200), and
   prefill tokens/s; then the peak memory of loading it in bf16, in FP8 and (a GGUF file)
   kept quantized (`load_memory_check`: FP8 is quantized tensor by tensor as it loads).

Models, built here since the GPU machine reaches no model hub:
- ``smollm2-135m``: the demo GGUF (`scripts/fetch-demo-model.sh`) when ``--gguf`` names it
  or it sits in .enclave/models; otherwise random weights of its shape (30 layers, hidden
  576, 9 heads over 3 KV heads, vocab 49,152, tied embeddings), which run at its speed.
- ``llama-1b``: a random Llama with Llama 3.2 1B's shape (16 layers, hidden 2048, 32
  heads over 8 KV heads, intermediate 8192, vocab 128,256, tied): 1.24B parameters, built
  from a transformers `LlamaConfig`.

Prints tables and writes JSON (default docs/benchmarks/gpu-check-<date>.json), rewritten
after each part: a part that raises is recorded with its error and the next one runs, and
SIGTERM (the script's time limit) saves what ran with ``"complete": false``. Exits 2 at
once without CUDA, 1 when a check failed or did not run. ``--device cpu --quick`` runs
the plumbing on a CPU (kernels under triton's interpreter, a tiny model, tiny batches).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import importlib.metadata
import importlib.util
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inference.bench.load_memory_check import load_memory
from inference.bench.random_llama import SHAPES, build_random_llama

HBM_BYTES_PER_S = 4.3e12
REPO = Path(__file__).resolve().parents[2]


@dataclasses.dataclass(frozen=True)
class Workload:
    batches: tuple[int, ...] = (1, 32, 128)
    input_len: int = 128
    output_len: int = 128
    prefill_prompts: int = 32
    prefill_len: int = 1024


QUICK = Workload(batches=(1, 2), input_len=8, output_len=4, prefill_prompts=2, prefill_len=16)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpu_check", description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--quick", action="store_true", help="tiny shapes: plumbing only")
    parser.add_argument("--models", default=None, help="comma-separated: smollm2-135m,llama-1b")
    parser.add_argument("--gguf", help="the SmolLM2 GGUF (default: .enclave/models/...)")
    parser.add_argument("--workdir", default="/tmp/enclave-gpu-check", help="built models")
    parser.add_argument("--output", help="JSON path (default docs/benchmarks/gpu-check-DATE)")
    parser.add_argument("--skip-kernels", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device == "cpu":
        # Only the interpreter runs Triton on a CPU; it must be on before triton loads.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: gpu_check needs a CUDA GPU and torch sees none", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    quick = args.quick or args.device == "cpu"
    models = (args.models or ("tiny" if quick else "smollm2-135m,llama-1b")).split(",")
    unknown = [name for name in models if name not in SHAPES]
    if unknown:  # before anything runs
        print(f"error: unknown model {unknown[0]!r}; known: {', '.join(SHAPES)}", file=sys.stderr)
        return 2
    date = datetime.date.today().isoformat()
    output = Path(args.output or REPO / f"docs/benchmarks/gpu-check-{date}.json")
    report: dict[str, Any] = {
        "benchmark": "gpu-check",
        "date": date,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": _version("triton"),
        "quick": quick,
        "complete": False,  # true once every part has run (each part's failure is in it)
    }
    # The JSON is rewritten after every part, so a crash or the time limit keeps what ran.
    signal.signal(signal.SIGTERM, _terminated)
    started = time.perf_counter()
    try:
        ok = run_parts(report, output, args, device, models, quick)
        report["complete"] = True
    except Terminated:
        report["error"] = "terminated (SIGTERM: the time limit?) before every part ran"
        ok = False
    finally:
        report["seconds"] = round(time.perf_counter() - started, 1)
        save(report, output)
        print(f"wrote {output}")
    if not ok:
        print("error: a check failed or did not run (see above and the JSON)", file=sys.stderr)
    return 0 if ok else 1


def run_parts(
    report: dict[str, Any],
    output: Path,
    args: argparse.Namespace,
    device: Any,
    models: list[str],
    quick: bool,
) -> bool:
    """Kernels, then each model's benchmarks, each saved as it ends; False if any failed."""
    ok = True
    if not args.skip_kernels:
        from inference.bench.kernel_check import run_kernel_checks

        started = time.perf_counter()
        kernels = guarded("kernel checks", run_kernel_checks, device, quick=quick)
        report["kernels"] = kernels
        report["kernel_check_seconds"] = round(time.perf_counter() - started, 1)
        if isinstance(kernels, dict):  # not even one case could run
            ok = False
        else:
            print_kernel_table(kernels)
            ok = all(k["ok"] for k in kernels)
        save(report, output)
        from inference.bench.group_gemm_check import print_results, run_group_gemm_checks

        group = guarded("group-quantized matmul", run_group_gemm_checks, device, quick=quick)
        report["group_quant_matmul"] = group
        ok = ok and "error" not in group and all(c["ok"] for c in group["cases"])
        if "error" not in group:
            print_results(group)
        save(report, output)
    workload = QUICK if quick else Workload()
    report["workload"] = dataclasses.asdict(workload)
    report["models"] = {}
    if importlib.util.find_spec("gguf") is None:  # the engine imports it; a GPU image may lack it
        print("error: no `gguf` package, so no engine: see scripts/gpu_check.sh", file=sys.stderr)
        report["error"] = "no gguf package: the engine could not be imported"
        return False
    for name in models:
        entry: dict[str, Any] = {}
        report["models"][name] = entry
        found = guarded(f"{name}: building the model", model_path, name, args, device)
        if isinstance(found, dict):
            entry.update(found)
            save(report, output)
            ok = False
            continue
        path, entry["source"] = found
        for weights in ("bf16", "fp8"):
            entry[weights] = guarded(
                f"{name} {weights}", bench_model, path, weights, device, workload
            )
            ok = ok and not (isinstance(entry[weights], dict) and "error" in entry[weights])
            save(report, output)
        loads = guarded(f"{name} load memory", load_memory, path, device)
        entry["load_memory"] = loads
        ok = ok and "error" not in loads and all("error" not in v for v in loads.values())
        print(f"{name} peak memory while loading (MiB): {entry['load_memory']}")
        save(report, output)
        if device.type == "cuda" and name == models[0]:
            entry["graphs_vs_eager"] = guarded(f"{name} graphs", graphs_vs_eager, path)
            ok = ok and "error" not in entry["graphs_vs_eager"]
            print(f"CUDA graphs vs eager, greedy tokens equal: {entry['graphs_vs_eager']}")
            save(report, output)
        print_speed_table(name, entry.get("source", "?"), entry, workload)
    return ok


class Terminated(BaseException):
    """SIGTERM arrived (`timeout` in scripts/gpu_check.sh): save what ran, then stop."""


def _terminated(signum: int, frame: object) -> None:
    raise Terminated


def guarded(what: str, part: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``part(...)``, or {"error": ...} (printed with its traceback) if it raises."""
    import torch

    try:
        return part(*args, **kwargs)
    except Exception as error:
        trace = traceback.format_exc()
        print(f"error: {what}: {trace}", file=sys.stderr)
        return {"error": f"{type(error).__name__}: {error}", "traceback": trace[-4000:]}
    finally:
        gc.collect()  # an engine and its KV pool go before the next part
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def save(report: dict[str, Any], output: Path) -> None:
    """Write the report whole or not at all (a SIGKILL may follow a SIGTERM)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n")
    os.replace(partial, output)


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def fp8_available() -> bool:
    from inference.engine.engine_config import EngineConfig

    return "quantization" in {f.name for f in dataclasses.fields(EngineConfig)}


def bench_model(path: str, weights: str, device: Any, workload: Workload) -> dict[str, Any] | str:
    """Prefill and decode speed of one model with bf16 or fp8 weights."""
    import torch

    from inference import LLM, SamplingParams

    kwargs: dict[str, Any] = {}
    if weights == "fp8":
        if not fp8_available():
            return "fp8: not available"
        kwargs["quantization"] = "fp8"
    largest = max(workload.batches)
    started = time.perf_counter()
    llm = LLM(
        path,
        dtype="bfloat16",
        device=device.type,
        enable_prefix_caching=False,  # every run computes its prompts
        max_num_seqs=max(largest, workload.prefill_prompts),
        max_num_batched_tokens=8192,
        max_model_len=max(workload.input_len + workload.output_len, workload.prefill_len) + 8,
        kv_cache_memory_bytes=(8 << 30) if device.type == "cuda" else (16 << 20),
        progress=False,
        **kwargs,
    )
    vocab = llm.engine.arch.vocab_size
    gen = torch.Generator().manual_seed(0)

    def prompts(n: int, length: int) -> list[list[int]]:
        return torch.randint(3, vocab, (n, length), generator=gen).tolist()

    def timed(batch: list[list[int]], max_tokens: int) -> float:
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        started = time.perf_counter()
        llm.generate(batch, params)
        return time.perf_counter() - started

    model = llm.engine.model
    weight_bytes = sum(t.numel() * t.element_size() for t in model.parameters())
    weight_bytes += sum(t.numel() * t.element_size() for t in model.buffers())
    result: dict[str, Any] = {"weight_bytes": weight_bytes, "decode_tokens_per_s": {}}
    timed(prompts(2, 16), 4)  # compile the kernels
    prefill = prompts(workload.prefill_prompts, workload.prefill_len)
    # The first prefill of this size compiles kernels and picks cuBLAS's: untimed (an H200
    # took 0.78 s for it against 0.03 s warm, which made bf16, run first, look slower).
    timed(prefill, 1)
    seconds = timed(prefill, 1)
    result["prefill_tokens_per_s"] = round(len(prefill) * workload.prefill_len / seconds, 1)
    for batch_size in workload.batches:
        batch = prompts(batch_size, workload.input_len)
        timed(batch, 4)  # captures this size's CUDA graph, outside the timing
        prefill_only = timed(batch, 1)
        full = timed(batch, 1 + workload.output_len)
        step_seconds = max(full - prefill_only, 1e-9) / workload.output_len
        result["decode_tokens_per_s"][str(batch_size)] = round(batch_size / step_seconds, 1)
        if batch_size == 1:
            result["batch1_step_ms"] = round(step_seconds * 1e3, 3)
            result["batch1_hbm_fraction"] = round(weight_bytes / step_seconds / HBM_BYTES_PER_S, 3)
    graphs = llm.engine.runner.decode_graphs
    result["cuda_graphs_captured"] = graphs.num_captured if graphs is not None else 0
    result["seconds"] = round(time.perf_counter() - started, 1)  # loading included
    return result


def graphs_vs_eager(path: str) -> dict[str, Any]:
    """Greedy tokens with CUDA graphs against eager decoding: the fraction that agree.

    Both run the same kernels, with split counts that may differ, so a near tie in a
    random model can flip a token; a real model should agree everywhere.
    """
    import torch

    from inference import LLM, SamplingParams

    tokens: list[list[int]] = []
    for eager in (True, False):
        llm = LLM(
            path,
            dtype="bfloat16",
            enforce_eager=eager,
            max_model_len=256,
            progress=False,
            kv_cache_memory_bytes=1 << 30,
        )
        gen = torch.Generator().manual_seed(1)  # the same prompts both times
        prompts = torch.randint(3, llm.engine.arch.vocab_size, (8, 32), generator=gen).tolist()
        params = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
        outputs = llm.generate(prompts, params)
        tokens.append([t for o in outputs for t in o.outputs[0].token_ids])
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    same = sum(a == b for a, b in zip(*tokens, strict=True))
    return {"tokens": len(tokens[0]), "equal_fraction": round(same / max(len(tokens[0]), 1), 4)}


def model_path(name: str, args: argparse.Namespace, device: Any) -> tuple[str, str]:
    """(path, what it is): the demo GGUF where present, else a random model of the shape."""
    if name == "smollm2-135m":
        gguf = Path(args.gguf or REPO / ".enclave/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        if gguf.is_file():
            return str(gguf), f"GGUF {gguf.name}"
    directory = Path(args.workdir) / name
    if not (directory / "config.json").is_file():
        build_random_llama(directory, SHAPES[name], device)
    return str(directory), f"random weights, {name} shape (transformers LlamaConfig)"


def print_kernel_table(kernels: list[dict[str, Any]]) -> None:
    print(f"\n{'kernel case':<36} {'seqs':>5} {'tokens':>7} {'rel err':>9} {'kv equal':>9}  ok")
    for k in kernels:
        if "error" in k:
            print(f"{k['case']}: NO, {k['error']}")
            continue
        kv_equal = "-" if k["kv_bytes_equal"] is None else f"{k['kv_bytes_equal']:.4f}"
        print(
            f"{k['case']:<36} {k['seqs']:>5} {k['tokens']:>7} {k['rel_error']:>9.2e} "
            f"{kv_equal:>9}  {'yes' if k['ok'] else 'NO'}"
        )


def print_speed_table(name: str, source: str, entry: dict[str, Any], workload: Workload) -> None:
    print(f"\n{name} ({source})")
    header = "".join(f"{'decode b=' + str(b):>14}" for b in workload.batches)
    print(f"{'weights':<8}{header}{'b=1 HBM':>10}{'prefill':>12}   (tokens/s)")
    for weights in ("bf16", "fp8"):
        result = entry.get(weights, "did not run")
        if isinstance(result, str) or "error" in result:
            print(f"{weights:<8}{result if isinstance(result, str) else result['error']}")
            continue
        decode = "".join(
            f"{result['decode_tokens_per_s'][str(b)]:>14.1f}" for b in workload.batches
        )
        hbm = f"{result['batch1_hbm_fraction']:.1%}" if "batch1_hbm_fraction" in result else "-"
        print(f"{weights:<8}{decode}{hbm:>10}{result['prefill_tokens_per_s']:>12.1f}")


if __name__ == "__main__":
    sys.exit(main())
