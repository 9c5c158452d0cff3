"""`python -m inference bench int8-accuracy`: how far int8 activations move predictions.

`--int8-activations` changes a group-quantized model's arithmetic at decode steps (each
row of activations rounded to int8 per block of 32, integer dot products), so its effect
is measured like FP8's (`fp8_accuracy.py`): over each text, every position's next-token
logits, compared with a reference by top-1 agreement, mean KL divergence, and the
reference's own margin where they disagree.

The model is loaded as it is served (a GGUF file with `--quantization gguf`, or a GPTQ /
AWQ directory), and each text is fed in chunks of `--chunk` tokens, fewer than a layer
needs to leave its kernel, so that every matmul, the output projection included, runs
through the kernel that a decode step runs. The reference is the exact kernel with float32
activations; the rows are what bf16 activations alone move, what int8 activations move,
and int8 against bf16 as served (both with bf16 activations outside the matmuls).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from inference.bench.fp8_accuracy import BLOCK, compare, read_texts
from inference.bench.machine import cpu_model
from inference.kernels.attention import TorchAttentionBackend, paged_layout
from inference.kernels.cpu.layers import load_layer_kernels
from inference.kernels.cpu.quant_linear import MAX_KERNEL_ROWS
from inference.kernels.kv_cache import KVCache
from inference.model.llama import LlamaForCausalLM
from inference.model.loader import load_model
from inference.model.quant.group_apply import use_int8_activations
from inference.model.quant.group_linear import GroupQuantWeights


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="a .gguf file or a GPTQ/AWQ directory")
    parser.add_argument(
        "--quantization",
        choices=["gguf", "gptq", "awq"],
        help="gguf for a GGUF file (kept quantized); a GPTQ/AWQ directory loads as it is",
    )
    parser.add_argument(
        "--text",
        action="append",
        metavar="FILE",
        help="a UTF-8 text file to score (repeatable); default: the built-in passages",
    )
    parser.add_argument("--tokens", type=int, default=512, help="positions scored per text")
    parser.add_argument(
        "--chunk", type=int, default=8, help=f"tokens fed at once (1 to {MAX_KERNEL_ROWS - 1})"
    )
    parser.add_argument("--output", help="also write the JSON to this file")
    parser.set_defaults(run=run)


@torch.inference_mode()
def chunked_logits(model: LlamaForCausalLM, tokens: list[int], chunk: int) -> torch.Tensor:
    """Float32 next-token logits (T, vocab) of ``tokens`` fed ``chunk`` at a time through
    the paged path, each chunk attending to the ones before it (as decode steps do)."""
    config, n = model.config, len(tokens)
    blocks = -(-n // BLOCK)
    shape = (blocks, BLOCK, config.num_kv_heads, config.head_dim)
    caches = [
        KVCache(torch.zeros(shape, dtype=model.dtype), torch.zeros(shape, dtype=model.dtype))
        for _ in range(config.num_layers)
    ]
    backend, table = TorchAttentionBackend(), [list(range(blocks))]
    logits = []
    for start in range(0, n, chunk):
        end = min(n, start + chunk)
        layout = paged_layout(range(start, end), [0, end - start], [end], table, BLOCK)
        meta = backend.build_metadata(layout, torch.device("cpu"))
        hidden = model(torch.tensor(tokens[start:end]), torch.arange(start, end), caches, meta)
        logits.append(model.compute_logits(hidden).float())
    return torch.cat(logits)


def served_model(args: argparse.Namespace, dtype: torch.dtype, int8: bool) -> LlamaForCausalLM:
    model, _ = load_model(args.model, dtype=dtype, progress=False, quantization=args.quantization)
    kernels = load_layer_kernels()
    if kernels is None or kernels.quant is None:
        raise ValueError("the group-quantized CPU kernels did not build (is a C compiler there?)")
    if int8 and kernels.quant.int8_path is None:
        raise ValueError("the int8-activation kernel did not build")
    model.set_layer_kernels(kernels)
    if not any(isinstance(module, GroupQuantWeights) for module in model.modules()):
        raise ValueError(f"{args.model} loaded no group-quantized layers: give a .gguf file "
                         "with --quantization gguf, or a GPTQ/AWQ directory")  # fmt: skip
    if int8:
        use_int8_activations(model, torch.device("cpu"))
    return model.eval()


def run(args: argparse.Namespace) -> int:
    if args.tokens < 2:
        raise ValueError("--tokens must be at least 2")
    if not 1 <= args.chunk < MAX_KERNEL_ROWS:
        raise ValueError(f"--chunk must be in [1, {MAX_KERNEL_ROWS - 1}], got {args.chunk}")
    if str(args.model).endswith(".gguf") and args.quantization != "gguf":
        raise ValueError("a GGUF file needs --quantization gguf (kept quantized)")
    started = time.perf_counter()
    reference_model = served_model(args, torch.float32, int8=False)
    encode = _encoder(args.model, reference_model)
    tokens: dict[str, list[int]] = {}
    for name, text in read_texts(args.text).items():
        ids = encode(text)
        if len(ids) < args.tokens:
            raise ValueError(f"text {name} has {len(ids)} tokens; --tokens asks for {args.tokens}")
        tokens[name] = ids[: args.tokens]

    def score(model: LlamaForCausalLM) -> dict[str, torch.Tensor]:
        return {name: chunked_logits(model, ids, args.chunk) for name, ids in tokens.items()}

    reference = score(reference_model)
    rows: dict[str, dict[str, dict[str, Any]]] = {}

    def add(row: str, logits: dict[str, torch.Tensor], against: dict[str, torch.Tensor]) -> None:
        rows[row] = {name: compare(against[name], logits[name]) for name in tokens}

    add("int8 activations (float32 elsewhere)", score(served_model(args, torch.float32, True)),
        reference)  # fmt: skip
    bf16 = score(served_model(args, torch.bfloat16, int8=False))
    add("bf16 activations", bf16, reference)
    int8_served = score(served_model(args, torch.bfloat16, int8=True))
    add("int8 activations (bf16 elsewhere)", int8_served, reference)
    add("int8 served vs bf16 served", int8_served, bf16)
    result = {
        "benchmark": "int8-accuracy",
        "model": args.model,
        "quantization": args.quantization,
        "tokens_per_text": args.tokens,
        "chunk": args.chunk,
        "texts": list(tokens),
        "reference": "the exact group-quantized kernel, float32 activations",
        "rows": {
            row: {**per_text, "mean_top1_agreement": _mean(per_text)}
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


def _encoder(path: str, model: LlamaForCausalLM) -> Any:
    if str(path).endswith(".gguf"):
        from inference.model.loader.gguf import read_gguf

        backend = read_gguf(path).tokenizer
        return lambda text: list(backend.encode(text).ids)
    from inference.text.tokenizer import Tokenizer

    return Tokenizer.from_dir(Path(path)).encode


def _mean(per_text: dict[str, dict[str, Any]]) -> float:
    values = [metrics["top1_agreement"] for metrics in per_text.values()]
    return round(sum(values) / len(values), 4)
