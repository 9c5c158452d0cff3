"""`bench throughput --constrained-share S`: a batch with a share of its requests under a
JSON schema against the same batch all free, in the same run, taking turns.

The schema asks for more items than ``--output-len`` tokens can hold, so every constrained
request runs to its max_tokens like the free ones (``ignore_eos``): both batches produce the
same number of tokens and their tokens/s compare directly. The mixed batch runs twice, with
the masks filled beside the forward pass (the engine's default) and inline before it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from inference.grammar import Constraint
from inference.grammar.masks import MaskStats

ITEM = {
    "type": "object",
    "properties": {
        "part": {"type": "string", "maxLength": 16},
        "defect": {"enum": ["scratch", "dent", "crack", "burr"]},
        "depth_um": {"type": "integer", "minimum": 0, "maximum": 1000},
        "ok": {"type": "boolean"},
    },
    "required": ["part", "defect", "depth_um", "ok"],
    "additionalProperties": False,
}


def long_schema(output_len: int) -> dict[str, Any]:
    """Each item takes well over 8 tokens: output_len / 4 items cannot fit."""
    return {
        "type": "object",
        "properties": {"findings": {"type": "array", "items": ITEM, "minItems": output_len // 4}},
        "required": ["findings"],
        "additionalProperties": False,
    }


def constrained_indices(num_prompts: int, share: float) -> list[int]:
    """Spread through the batch: share 0.5 constrains every other request."""
    return [i for i in range(num_prompts) if int((i + 1) * share) > int(i * share)]


def compare(
    llm: Any, args: Any, prompts_for_round: Callable[[int], list[list[int]]]
) -> dict[str, Any]:
    from inference import SamplingParams

    schema = long_schema(args.output_len)
    free = SamplingParams(temperature=0, max_tokens=args.output_len, ignore_eos=True)
    constrained = SamplingParams(
        temperature=0,
        max_tokens=args.output_len,
        ignore_eos=True,
        constraint=Constraint("json_schema", json.dumps(schema)),
    )
    engine = llm.engine
    chosen = set(constrained_indices(args.num_prompts, args.constrained_share))
    mixed_params = [constrained if i in chosen else free for i in range(args.num_prompts)]
    runs: dict[str, list[dict[str, Any]]] = {"all_free": [], "mixed": [], "mixed_inline": []}
    for round_index in range(args.rounds):
        prompts = prompts_for_round(round_index)
        for name, params, overlap in (
            ("all_free", [free] * len(prompts), True),
            ("mixed", mixed_params, True),
            ("mixed_inline", mixed_params, False),
        ):
            engine.masks.overlap = overlap
            engine.masks.stats = MaskStats()
            started = time.perf_counter()
            outputs = llm.generate(prompts, params)
            elapsed = time.perf_counter() - started
            tokens = sum(len(o.outputs[0].token_ids) for o in outputs)
            run: dict[str, Any] = {
                "elapsed_seconds": round(elapsed, 2),
                "output_tokens": tokens,
                "output_tokens_per_s": round(tokens / elapsed, 1),
            }
            if name != "all_free":
                run.update({k: round(v, 3) for k, v in engine.masks.stats.as_dict().items()})
                done = [outputs[i].outputs[0] for i in sorted(chosen)]
                run["constrained_finish_reasons"] = dict(Counter(c.finish_reason for c in done))
                run["constrained_text_sample"] = done[0].text[:120]
            runs[name].append(run)
    engine.masks.overlap = True
    best = {name: max(r, key=lambda run: run["output_tokens_per_s"]) for name, r in runs.items()}
    free_rate = best["all_free"]["output_tokens_per_s"]
    return {
        "share": args.constrained_share,
        "num_constrained": len(chosen),
        "schema": "findings: array of >= output_len/4 objects (string, enum, bounded int, bool)",
        **{
            name: {**run, "per_round": [r["output_tokens_per_s"] for r in runs[name]]}
            for name, run in best.items()
        },
        "mixed_vs_all_free": round(best["mixed"]["output_tokens_per_s"] / free_rate, 3),
        "mixed_inline_vs_all_free": round(
            best["mixed_inline"]["output_tokens_per_s"] / free_rate, 3
        ),
    }
