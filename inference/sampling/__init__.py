"""Sampling: per-request parameters and the batched sampler."""

from inference.sampling.logprobs import TokenLogprobs, token_logprobs
from inference.sampling.params import SamplingParams
from inference.sampling.sampler import (
    Sampler,
    SamplerOutput,
    SamplingRow,
    make_generator,
)

__all__ = [
    "Sampler",
    "SamplerOutput",
    "SamplingParams",
    "SamplingRow",
    "TokenLogprobs",
    "make_generator",
    "token_logprobs",
]
