"""`python -m inference bench throughput --speculative ngram|draft ...`: speculation
against plain (``--speculative draft --draft-model PATH`` for a draft model).

Two engines on the same model in one process, the plain one and the speculative one,
take turns on the same prompts for ``--rounds`` rounds; each is reported at its best round
(as in throughput.py), with the acceptance counters and the machine's load average, since
the machine may be shared. Greedy, so both emit the same tokens (counted). The engine
that goes first in a round is slower on a CPU (oneDNN builds its kernels for the round's
new shapes once per process, and the second engine reuses them), so the order alternates
and four rounds give each engine two turns in second place.

``--workload repetitive`` asks the model to edit a piece of code given in the prompt (it
answers with most of the code again, which the n-gram proposer finds), up to
``--output-len`` tokens or EOS; ``random`` is throughput.py's random prompts with
``ignore_eos``, where it rarely proposes anything useful.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from typing import Any

CODE = '''def {name}(values, limit={limit}):
    """Return the {what} of the values under the limit."""
    kept = [value for value in values if value < limit]
    if not kept:
        raise ValueError("no value under the limit")
    total = 0
    for value in kept:
        total += value * {factor}
    return total / len(kept)
'''
NAMES = ["mean_under", "scaled_average", "bounded_mean", "filtered_score", "capped_rate"]
WHATS = ["scaled mean", "weighted average", "mean", "score", "rate"]


def repetitive_prompts(tokenizer: Any, num_prompts: int, seed: int) -> list[list[int]]:
    """Chat prompts (the model's template) asking to edit a function given in full, each
    its own (a small instruct model answers with most of the code again)."""
    rng = random.Random(seed)
    prompts = []
    for _ in range(num_prompts):
        code = CODE.format(
            name=rng.choice(NAMES) + str(rng.randrange(100)),
            limit=rng.randrange(10, 1000),
            what=rng.choice(WHATS),
            factor=rng.randrange(2, 9),
        )
        ask = (
            f"Here is my Python code:\n```python\n{code}```\n"
            "Please rename the function to `compute` and show the whole code."
        )
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": ask}], add_generation_prompt=True
        )
        prompts.append(tokenizer.encode(text, add_special_tokens=False))
    return prompts


def run_speculative(args: argparse.Namespace) -> int:
    import torch

    from inference import LLM, SamplingParams
    from inference.bench.machine import cpu_model
    from inference.bench.throughput import make_prompts
    from inference.engine.spec_decode import SpecDecodeStats

    common: dict[str, Any] = {
        "dtype": args.dtype,
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "quantization": args.quantization,
        "progress": False,
    }
    engines = {
        "plain": LLM(args.model, **common),
        "speculative": LLM(
            args.model,
            speculative=args.speculative,
            num_speculative_tokens=args.num_speculative_tokens,
            ngram_min=args.ngram_min,
            ngram_max=max(3, args.ngram_min),
            speculative_max_batch=args.speculative_max_batch,
            draft_model=args.draft_model,
            **common,
        ),
    }
    params = SamplingParams(
        temperature=0, max_tokens=args.output_len, ignore_eos=args.workload == "random"
    )
    warm = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    for llm in engines.values():
        llm.generate(repetitive_prompts(llm.tokenizer, 2, seed=-1), warm)
    spec = engines["speculative"].engine.spec
    assert spec is not None
    spec.stats = stats = SpecDecodeStats()  # count the timed rounds only
    load_before = os.getloadavg()
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    rates: dict[str, list[float]] = {name: [] for name in engines}
    identical = 0
    for round_index in range(args.rounds):
        prompts: list[Any]
        if args.workload == "repetitive":
            prompts = repetitive_prompts(
                engines["plain"].tokenizer, args.num_prompts, args.seed * 1000 + round_index
            )
        else:
            llm = engines["plain"]
            special = set(llm.tokenizer.all_special_ids)
            prompts = make_prompts(llm.engine.arch.vocab_size, special, args, round_index)
        results = {}
        order = list(engines) if round_index % 2 == 0 else list(reversed(engines))
        for name in order:  # alternating who goes first
            llm = engines[name]
            started = time.perf_counter()
            outputs = llm.generate(prompts, params)
            seconds[name].append(time.perf_counter() - started)
            results[name] = [o.outputs[0].token_ids for o in outputs]
            rates[name].append(sum(len(t) for t in results[name]) / seconds[name][-1])
        pairs = zip(results["plain"], results["speculative"], strict=True)
        identical += sum(a == b for a, b in pairs)
    best = {name: max(rate) for name, rate in rates.items()}
    result: dict[str, Any] = {
        "benchmark": "throughput-speculative",
        "date": args.date,
        "model": args.model,
        "dtype": str(engines["plain"].engine.dtype).removeprefix("torch."),
        "workload": args.workload,
        "num_prompts": args.num_prompts,
        "output_len": args.output_len,
        "speculative": args.speculative,
        "num_speculative_tokens": args.num_speculative_tokens,
        "ngram_min": args.ngram_min,
        "speculative_max_batch": args.speculative_max_batch,
        "draft_model": args.draft_model,
        "cpu": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "rounds": args.rounds,
        # Greedy: the same tokens, exactly in float32; in bfloat16 the verify step's chunk
        # attention and the decode kernel round differently, so a near-tie can flip.
        "sequences_identical": f"{identical}/{args.rounds * args.num_prompts}",
        **{f"{name}_output_tokens_per_s": round(best[name], 1) for name in engines},
        **{f"{k}_tokens_per_s_per_round": [round(r, 1) for r in rates[k]] for k in engines},
        "speedup": round(best["speculative"] / best["plain"], 3),
        **stats.as_dict(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        with open(args.output, "w") as handle:
            handle.write(text + "\n")
    return 0
