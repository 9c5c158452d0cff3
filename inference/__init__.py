"""Enclave's inference engine and worker: a standalone, vLLM-class engine in torch.

The offline API::

    from inference import LLM, SamplingParams
    llm = LLM(model="path/to/model-dir-or-file.gguf")
    outputs = llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=32))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["LLM", "SamplingParams"]

if TYPE_CHECKING:
    from inference.llm import LLM
    from inference.sampling.params import SamplingParams


def __getattr__(name: str) -> Any:
    # Lazy, so that `python -m inference --help` and light imports do not load torch.
    if name == "LLM":
        from inference.llm import LLM

        return LLM
    if name == "SamplingParams":
        from inference.sampling.params import SamplingParams

        return SamplingParams
    raise AttributeError(name)
