"""Which model class serves which Hugging Face architecture name."""

from __future__ import annotations

from inference.model.arch import SUPPORTED_ARCHITECTURES, ArchConfig
from inference.model.llama import LlamaForCausalLM

# Every supported architecture is a Llama variant; ArchConfig carries the differences.
MODEL_CLASSES: dict[str, type[LlamaForCausalLM]] = dict.fromkeys(
    SUPPORTED_ARCHITECTURES, LlamaForCausalLM
)


def model_class_for(config: ArchConfig) -> type[LlamaForCausalLM]:
    try:
        return MODEL_CLASSES[config.architecture]
    except KeyError:
        raise ValueError(
            f"unsupported architecture {config.architecture!r}; "
            f"supported: {', '.join(MODEL_CLASSES)}"
        ) from None
