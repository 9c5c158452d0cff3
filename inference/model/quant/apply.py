"""Quantize a model to FP8, once loaded or while it loads: the decoder's linears per row, the
vocabulary finer.

Measured on SmolLM2-135M (docs/engine.md): e4m3 rounding of the output projection moves
the logits more than that of any decoder layer, and a scale per group of 16 hidden columns
cuts that damage to about a third for 0.25 extra bytes a parameter, while groups in the
decoder's layers buy little for their bytes. The embedding table is quantized too (its
lookups hardly notice), so a tied model holds one FP8 table and the whole model is about
half of bf16.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from inference.model.layers.embedding import VocabEmbedding
from inference.model.layers.linear import FusedLinear
from inference.model.quant.fp8 import Fp8Linear, replace_linears
from inference.model.quant.fp8_embedding import Fp8Embedding

# Hidden columns per scale in the embedding table and the output projection.
VOCAB_GROUP_SIZE = 16
OUTPUT_PROJECTION = "lm_head"


def quantize_model_fp8(model: nn.Module, *, vocab: bool = True) -> int:
    """Replace every FusedLinear in `model` by an Fp8Linear quantized from it, in place.

    The tree is walked generically, so linears wrapped in other modules are found too;
    each is swapped by attribute on its parent, which frees its weight in the model dtype.
    With `vocab`, the output projection (``lm_head``) gets grouped scales and every
    `VocabEmbedding` becomes an `Fp8Embedding`; without it both stay in the model dtype.
    Returns the number of linear layers replaced.
    """
    return _swap_fp8(
        model,
        vocab,
        lambda linear, group_size: Fp8Linear.from_linear(linear, group_size=group_size),
        lambda table: Fp8Embedding.from_embedding(table, group_size=VOCAB_GROUP_SIZE),
    )


def prepare_fp8_at_load(model: nn.Module, *, vocab: bool = True) -> int:
    """The layers `quantize_model_fp8` would make, empty, in a model not loaded yet: each
    quantizes its checkpoint tensors as they stream in (`Fp8Linear.quantize_on_load`), to
    the same bytes, so the model never exists whole in its float dtype. Build the model
    with `torch.empty` weights (never written before the swap, they take no memory)."""

    def linear(layer: FusedLinear, group_size: int | None) -> Fp8Linear:
        weight = layer.weight
        return Fp8Linear(
            layer.in_features, layer.shard_sizes, bias=layer.bias is not None,
            dtype=weight.dtype, device=weight.device, group_size=group_size,
            quantize_on_load=True,
        )  # fmt: skip

    def embedding(table: VocabEmbedding) -> Fp8Embedding:
        weight = table.weight
        return Fp8Embedding(*weight.shape, group_size=VOCAB_GROUP_SIZE, dtype=weight.dtype,
                            device=weight.device)  # fmt: skip

    return _swap_fp8(model, vocab, linear, embedding)


def _swap_fp8(
    model: nn.Module,
    vocab: bool,
    make_linear: Callable[[FusedLinear, int | None], Fp8Linear],
    make_embedding: Callable[[VocabEmbedding], Fp8Embedding],
) -> int:
    def make(name: str, linear: FusedLinear) -> Fp8Linear:
        is_output = name.rpartition(".")[2] == OUTPUT_PROJECTION
        return make_linear(linear, VOCAB_GROUP_SIZE if is_output else None)

    replaced = replace_linears(
        model, lambda name: vocab or name.rpartition(".")[2] != OUTPUT_PROJECTION, make
    )
    if vocab:
        embeddings = [
            (parent, name, child)
            for parent in model.modules()
            for name, child in parent.named_children()
            if isinstance(child, VocabEmbedding)
        ]
        for parent, name, child in embeddings:
            setattr(parent, name, make_embedding(child))
    return replaced
