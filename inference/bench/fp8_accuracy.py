"""`python -m inference bench fp8-accuracy`: how far FP8 weights and KV move predictions.

Over each text (by default the three passages in `passages.py`, written for this project),
one prefill gives every position's next-token logits, and each variant is compared with
a reference: top-1 agreement, mean KL divergence, and where the flips happen (the
reference's own margin between its first and second choice there, in nats).

The reference is the model with every weight rounded to bf16, run in float32, so that
the FP8 rows measure the weight format alone (what `tests/inference/quant` asserts). For
scale, two rows show what bf16 itself moves: the unrounded weights, and bf16 arithmetic.
"fp8 served vs bf16 served" compares the two as served: FP8 weights against bf16
weights, both with bf16 activations. "fp8 kv" keeps the reference's weights and
arithmetic but reads keys and values back from e4m3 pools (scale 1.0, as served unless a
checkpoint brings scales); "fp8 weights and kv" has both. An FP8 checkpoint cannot be the
input: there is no bf16 to compare.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from inference.bench.machine import cpu_model
from inference.bench.passages import PASSAGES
from inference.kernels.attention import TorchAttentionBackend, paged_layout
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.model.quant import quantize_model_fp8
from inference.model.registry import model_class_for

BLOCK = 16
# Positions where the reference prefers its top token by at least this many nats.
CONFIDENT_MARGIN = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="HF directory or .gguf file (not FP8)")
    parser.add_argument(
        "--text",
        action="append",
        metavar="FILE",
        help="a UTF-8 text file to score (repeatable); default: the built-in passages",
    )
    parser.add_argument("--tokens", type=int, default=512, help="positions scored per text")
    parser.add_argument("--output", help="also write the JSON to this file")
    parser.set_defaults(run=run)


Weights = dict[str, torch.Tensor]


def read_checkpoint(path: Path) -> tuple[ArchConfig, Weights, Callable[[str], list[int]]]:
    """Config, every tensor in float32, and the tokenizer's encode of a checkpoint."""
    if path.suffix == ".gguf":
        from inference.model.loader.gguf import read_gguf

        gguf = read_gguf(path)
        hf_config, tensors = gguf.hf_config, gguf.tensors
        backend = gguf.tokenizer

        def encode(text: str) -> list[int]:
            return list(backend.encode(text).ids)
    else:
        from inference.model.loader.hf import HFCheckpoint
        from inference.text.tokenizer import Tokenizer

        if not path.is_dir():
            raise FileNotFoundError(f"no checkpoint at {path}")
        checkpoint = HFCheckpoint(path)
        hf_config, tensors = checkpoint.config, checkpoint.tensors()
        encode = Tokenizer.from_dir(path).encode
    weights: Weights = {}
    for name, tensor in tensors:
        if not isinstance(tensor, torch.Tensor):  # read without keep_quantized: never
            raise ValueError(f"{name} is still quantized; the reference needs float weights")
        if tensor.dtype == torch.float8_e4m3fn or name.endswith("weight_scale"):
            raise ValueError(f"{path} is already FP8; give the bf16 (or GGUF) checkpoint")
        weights[name] = tensor.float()
    return ArchConfig.from_hf_config(hf_config), weights, encode


def build(
    config: ArchConfig, weights: Weights, dtype: torch.dtype, *, round_bf16: bool = True
) -> LlamaForCausalLM:
    model = model_class_for(config)(config, dtype)
    rounded = (t.bfloat16() if round_bf16 else t for t in weights.values())
    model.load_weights((name, t.to(dtype)) for name, t in zip(weights, rounded, strict=True))
    return model.eval()


@torch.inference_mode()
def prefill_logits(
    model: LlamaForCausalLM, tokens: list[int], kv_dtype: torch.dtype | None = None
) -> torch.Tensor:
    """One prefill of all tokens through the paged path; float32 logits (T, vocab).

    Attention reads every key and value back from pools of ``kv_dtype`` (default: the
    model's dtype), so an e4m3 pool's rounding reaches every position.
    """
    config, n = model.config, len(tokens)
    dtype = kv_dtype or model.dtype
    blocks = -(-n // BLOCK)
    shape = (blocks, BLOCK, config.num_kv_heads, config.head_dim)
    caches = [
        KVCache(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype))
        for _ in range(config.num_layers)
    ]
    layout = paged_layout(range(n), [0, n], [n], [list(range(blocks))], BLOCK)
    meta = TorchAttentionBackend().build_metadata(layout, torch.device("cpu"))
    hidden = model(torch.tensor(tokens), torch.arange(n), caches, meta)
    logits: torch.Tensor = model.compute_logits(hidden)
    return logits.float()


def compare(reference: torch.Tensor, other: torch.Tensor) -> dict[str, Any]:
    """Top-1 agreement, mean KL(reference || other), and where the flips fall."""
    log_p, log_q = reference.log_softmax(-1), other.log_softmax(-1)
    agree = reference.argmax(-1) == other.argmax(-1)
    top2 = log_p.topk(2, dim=-1).values
    margin = top2[:, 0] - top2[:, 1]
    confident = margin >= CONFIDENT_MARGIN
    flips = margin[~agree]
    return {
        "top1_agreement": round(agree.float().mean().item(), 4),
        "kl_mean": round((log_p.exp() * (log_p - log_q)).sum(-1).mean().item(), 5),
        "flips": int((~agree).sum().item()),
        "flips_median_margin_nats": round(flips.median().item(), 3) if flips.numel() else None,
        "confident_share": round(confident.float().mean().item(), 4),
        "top1_agreement_confident": round(agree[confident].float().mean().item(), 4),
    }


def read_texts(files: list[str] | None) -> dict[str, str]:
    if not files:
        return dict(PASSAGES)
    texts: dict[str, str] = {}
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise FileNotFoundError(f"no text file {file}")
        texts[path.name] = path.read_text(encoding="utf-8")
    return texts


def run(args: argparse.Namespace) -> int:
    if args.tokens < 2:
        raise ValueError("--tokens must be at least 2")
    started = time.perf_counter()
    config, weights, encode = read_checkpoint(Path(args.model))
    texts = read_texts(args.text)
    tokens: dict[str, list[int]] = {}
    for name, text in texts.items():
        ids = encode(text)
        if len(ids) < args.tokens:
            raise ValueError(f"text {name} has {len(ids)} tokens; --tokens asks for {args.tokens}")
        tokens[name] = ids[: args.tokens]

    def score(model: LlamaForCausalLM, kv: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        return {name: prefill_logits(model, ids, kv) for name, ids in tokens.items()}

    reference_model = build(config, weights, torch.float32)
    reference = score(reference_model)
    rows: dict[str, dict[str, dict[str, Any]]] = {}

    def add(row: str, logits: dict[str, torch.Tensor], against: dict[str, torch.Tensor]) -> None:
        rows[row] = {name: compare(against[name], logits[name]) for name in tokens}

    unrounded = build(config, weights, torch.float32, round_bf16=False)
    add("float32 weights", score(unrounded), reference)
    del unrounded
    bf16 = score(build(config, weights, torch.bfloat16))
    add("bf16 arithmetic", bf16, reference)
    decoder_only = build(config, weights, torch.float32)
    quantize_model_fp8(decoder_only, vocab=False)
    add("fp8 decoder only", score(decoder_only), reference)
    del decoder_only
    fp8 = build(config, weights, torch.float32)
    quantize_model_fp8(fp8)
    add("fp8", score(fp8), reference)
    add("fp8 kv", score(reference_model, FP8_KV_DTYPE), reference)
    add("fp8 weights and kv", score(fp8, FP8_KV_DTYPE), reference)
    del fp8, reference_model
    served = build(config, weights, torch.bfloat16)
    quantize_model_fp8(served)
    add("fp8 served vs bf16 served", score(served), bf16)

    result = {
        "benchmark": "fp8-accuracy",
        "model": args.model,
        "tokens_per_text": args.tokens,
        "texts": list(tokens),
        "reference": "bf16-rounded weights, float32 arithmetic",
        "rows": {
            row: {**per_text, "mean_top1_agreement": _mean(per_text, "top1_agreement")}
            for row, per_text in rows.items()
        },
        "cpu": cpu_model(),
        "torch_threads": torch.get_num_threads(),
        "elapsed_seconds": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n", encoding="utf-8")
    return 0


def _mean(per_text: dict[str, dict[str, Any]], key: str) -> float:
    return round(sum(metrics[key] for metrics in per_text.values()) / len(per_text), 4)
