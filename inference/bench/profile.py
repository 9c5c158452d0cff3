"""`python -m inference bench profile`: where a step's time goes, beside the machine's bound.

Three scenarios on one engine: a decode step at batch 1, a decode step at a larger batch
(``--batch``, 64 by default), and one prefill chunk (``--prefill-tokens``). For each, the
median step time measured plainly, then the same steps instrumented (`StepTimer`): the
phases (scheduling, input preparation, the model's forward by module, logits, sampling,
the rest) and, beside them, what the machine allows: the time to read every weight once
at the measured memory bandwidth, and the weights' matmul work at the measured peak
(`probe.py`). A decode step at batch 1 should sit near the first; the ratio printed says
how far it is.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

PHASES = ("schedule", "inputs", "forward", "logits", "sample", "post")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF directory or .gguf file")
    parser.add_argument(
        "--dtype",
        default="auto",
        help="auto (as serve picks: bf16 where the CPU multiplies it, else float32), "
        "float32, bfloat16 or float16",
    )
    parser.add_argument(
        "--quantization",
        # inference.model.quant.QUANTIZATIONS, without importing torch
        choices=["fp8", "gguf", "gptq", "awq"],
        help="fp8: quantized at load; gguf: a GGUF file's quantized weights kept",
    )
    parser.add_argument(
        "--int8-activations",
        action="store_true",
        help="group-quantized weights multiply int8-quantized activations at decode steps",
    )
    parser.add_argument(
        "--single-thread-small-kernels",
        action="store_true",
        help="the CPU kernels' small calls on one thread (for cores shared with other work)",
    )
    parser.add_argument(
        "--enforce-eager",
        action="store_true",
        help="no decode graphs (CUDA graphs; on a CPU, replayed kernel-call recordings)",
    )
    parser.add_argument("--batch", type=int, default=64, help="the larger decode batch")
    parser.add_argument("--prompt-len", type=int, default=64, help="each decoding prompt")
    parser.add_argument("--prefill-tokens", type=int, default=512, help="the prefill chunk")
    parser.add_argument("--steps", type=int, default=16, help="decode steps timed each way")
    parser.add_argument("--top", type=int, default=12, help="modules listed per scenario")
    parser.add_argument("--no-probe", action="store_true", help="skip the bandwidth probe")
    parser.add_argument("--output", help="also write the JSON to this file")
    parser.set_defaults(run=run)


def _check(args: argparse.Namespace) -> None:
    if not 1 <= args.batch <= 1024 or not 1 <= args.steps <= 1000:
        raise ValueError("--batch must be 1..1024 and --steps 1..1000")
    if not 1 <= args.prompt_len <= 8192 or not 1 <= args.prefill_tokens <= 32768:
        raise ValueError("--prompt-len must be 1..8192 and --prefill-tokens 1..32768")
    if args.top < 0:
        raise ValueError("--top must be >= 0")


def run(args: argparse.Namespace) -> int:
    _check(args)
    import torch

    from inference import LLM
    from inference.bench.machine import cpu_model
    from inference.bench.probe import probe
    from inference.bench.weight_bytes import decode_weights

    # A decoding sequence gets 3 * steps + 5 tokens (prefill, warm-ups, the three timings).
    longest = max(args.prompt_len + 3 * args.steps + 16, args.prefill_tokens + 8)
    llm = LLM(
        args.model,
        dtype=args.dtype,
        quantization=args.quantization,
        int8_activations=args.int8_activations,
        single_thread_small_kernels=args.single_thread_small_kernels,
        enforce_eager=args.enforce_eager,
        enable_prefix_caching=False,  # every prefill is computed, never a cache hit
        max_num_seqs=max(args.batch, 1),
        max_num_batched_tokens=max(2048, args.prefill_tokens, args.batch),
        max_model_len=longest,
        progress=False,
    )
    engine = llm.engine
    dtype = str(engine.dtype).removeprefix("torch.")  # what "auto" became
    weights, elements = decode_weights(engine.runner.model)
    peak = None if args.no_probe else probe()
    scenarios = [
        _decode(engine, 1, args),
        _decode(engine, args.batch, args),
        _prefill(engine, args),
    ]
    for scenario in scenarios:
        scenario["bound_ms"] = _bound(scenario, weights, elements, peak, dtype)
        scenario["modules_ms"] = dict(list(scenario["modules_ms"].items())[: args.top])
    result: dict[str, Any] = {
        "benchmark": "profile",
        "model": args.model,
        "dtype": dtype,
        "quantization": args.quantization,
        "int8_activations": args.int8_activations,
        "single_thread_small_kernels": args.single_thread_small_kernels,
        "enforce_eager": args.enforce_eager,
        "cpu": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "attention_backend": type(engine.runner.attention_backend).__name__,
        "weight_bytes_per_step": weights,
        "weights_per_step": elements,
        "machine": peak.as_json() if peak else None,
        "scenarios": scenarios,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(text + "\n")
    return 0


def _prompts(engine: Any, count: int, length: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = engine.arch.vocab_size
    special = set(engine.tokenizer.all_special_ids)
    usable = [t for t in range(vocab) if t not in special]
    return [[rng.choice(usable) for _ in range(length)] for _ in range(count)]


def _decode(engine: Any, batch: int, args: argparse.Namespace) -> dict[str, Any]:
    """``batch`` sequences prefilled, then decode steps: timed plainly, then instrumented."""
    from inference import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=3 * args.steps + 8, ignore_eos=True)
    ids = [f"decode-{batch}-{i}" for i in range(batch)]
    for request_id, prompt in zip(
        ids, _prompts(engine, batch, args.prompt_len, batch), strict=True
    ):
        engine.add_request(request_id, prompt, params)
    while engine.scheduler.waiting or any(
        s.num_output_tokens == 0 for s in engine.scheduler.running
    ):
        engine.step()
    for _ in range(3):  # oneDNN's primitives for this batch's shapes
        engine.step()
    try:
        result = _measure(engine, f"decode, batch {batch}", args.steps, tokens=batch)
        if len(engine.scheduler.running) != batch:  # every timed step decoded the batch
            raise RuntimeError(f"decoding sequences finished before the timings of {batch}")
        return result
    finally:
        for request_id in ids:
            engine.abort_request(request_id)


def _prefill(engine: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh prompt of ``--prefill-tokens`` each step, prefilled in one chunk."""
    from inference import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    rounds = max(3, args.steps // 4)
    prompts = iter(_prompts(engine, 3 * rounds + 2, args.prefill_tokens, 7))

    def one() -> float:
        engine.add_request(f"prefill-{time.perf_counter_ns()}", next(prompts), params)
        started = time.perf_counter()
        engine.step()
        return time.perf_counter() - started

    one()  # warm-up
    return _measure(
        engine,
        f"prefill, {args.prefill_tokens} tokens",
        rounds,
        one=one,
        tokens=args.prefill_tokens,
    )


def _measure(engine: Any, name: str, steps: int, *, tokens: int, one: Any = None) -> dict[str, Any]:
    from inference.bench.step_timer import StepTimer

    def plain_step() -> float:
        started = time.perf_counter()
        engine.step()
        return time.perf_counter() - started

    step = one or plain_step
    plain = [step() for _ in range(steps)]
    # A replayed decode graph runs no module, so the split is of eager steps, timed plainly
    # too: beside step_ms (the step as served) that is what the graphs save.
    runner = engine.runner
    graphs, runner.decode_graphs = runner.decode_graphs, None
    timer = StepTimer()
    try:
        eager = plain if graphs is None else [step() for _ in range(steps)]
        timer.attach(engine)
        timer.enabled = True
        step()  # the first instrumented step pays for setting the hooks up
        timer.reset()
        hooked = [step() for _ in range(steps)]
    finally:
        timer.enabled = False
        timer.detach()
        runner.decode_graphs = graphs
    total = sum(hooked)
    phases = timer.split(total)
    modules = sorted(timer.modules.items(), key=lambda kv: -kv[1])
    return {
        "scenario": name,
        "tokens_per_step": tokens,
        "step_ms": round(statistics.median(plain) * 1000, 3),
        "step_ms_eager": round(statistics.median(eager) * 1000, 3),
        "decode_graphs_recorded": 0 if graphs is None else graphs.num_captured,
        "step_ms_instrumented_mean": round(total / steps * 1000, 3),  # the phases' sum
        "phases_ms": {p: round(phases.get(p, 0.0) / steps * 1000, 3) for p in PHASES},
        "modules_ms": {k: round(v / steps * 1000, 3) for k, v in modules},
    }


def _bound(
    scenario: dict[str, Any], weights: int, elements: int, peak: Any, dtype: str
) -> dict[str, Any]:
    """The step's floor on this machine: reading the weights once, and their matmul work
    (two flops per weight per token; attention's own work is left out)."""
    if peak is None:
        return {}
    read_ms = weights / (peak.read_gb_s * 1e9) * 1000
    flops = 2 * elements * scenario["tokens_per_step"]
    tflops = peak.matmul_tflops.get("bfloat16" if dtype != "float32" else "float32", 0.0)
    compute_ms = flops / (tflops * 1e12) * 1000 if tflops else 0.0
    floor = max(read_ms, compute_ms)
    return {
        "weights_read_ms": round(read_ms, 3),
        "matmul_ms": round(compute_ms, 3),
        "bound": "bandwidth" if read_ms >= compute_ms else "compute",
        "step_over_bound": round(scenario["step_ms"] / floor, 2) if floor else None,
    }
