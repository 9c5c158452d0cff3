"""Quantized weights: FP8 (e4m3) linear layers, quantized at load or read pre-quantized;
group-quantized 4- and 8-bit layers that keep a GGUF file's blocks ("gguf") or a GPTQ / AWQ
checkpoint's packed weights ("gptq", "awq": loaded as they are without the setting too)."""

from inference.model.quant.apply import quantize_model_fp8
from inference.model.quant.fp8 import Fp8Linear
from inference.model.quant.fp8_embedding import Fp8Embedding
from inference.model.quant.fp8_math import quantize_weight_fp8

QUANTIZATIONS = ("fp8", "gguf", "gptq", "awq")

__all__ = [
    "QUANTIZATIONS",
    "Fp8Embedding",
    "Fp8Linear",
    "quantize_model_fp8",
    "quantize_weight_fp8",
]
