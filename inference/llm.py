"""The offline API, modelled on vLLM's: ``LLM(model=...).generate(prompts, params)``."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any, cast

from inference.engine.engine_config import EngineConfig
from inference.engine.llm_engine import LLMEngine
from inference.outputs import RequestOutput
from inference.sampling.params import SamplingParams
from inference.text.tokenizer import Tokenizer

Prompt = str | Sequence[int]


class LLM:
    """Load a model once and generate for batches of prompts.

    ``LLM(model="dir-or-file.gguf", dtype="auto", enable_prefix_caching=True,
    block_size=16, max_num_seqs=..., max_num_batched_tokens=..., max_model_len=...,
    kv_cache_memory_bytes=..., quantization="fp8", kv_cache_dtype="fp8",
    tensor_parallel_size=N)``: every keyword is a field of :class:`EngineConfig`. With
    tensor parallelism, `close` (or leaving a ``with LLM(...)`` block) stops the other ranks;
    they are stopped at exit otherwise.
    """

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.engine = LLMEngine(EngineConfig(model=str(model), **kwargs))
        self._ids = itertools.count()

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        tenants: Sequence[str] | None = None,
        weights: Sequence[float] | None = None,
    ) -> list[RequestOutput]:
        """Generate for every prompt (strings or lists of token ids); outputs keep order."""
        batch = _as_prompt_list(prompts)
        if params is None:
            params = SamplingParams()
        per_prompt = [params] * len(batch) if isinstance(params, SamplingParams) else list(params)
        if len(per_prompt) != len(batch):
            raise ValueError(
                f"got {len(per_prompt)} SamplingParams for {len(batch)} prompts; pass one or "
                "one per prompt"
            )
        for name, values in (("tenants", tenants), ("weights", weights)):
            if values is not None and len(values) != len(batch):
                raise ValueError(f"{name} must have one entry per prompt")
        ids = [f"offline-{next(self._ids)}" for _ in batch]
        try:
            for i, (request_id, prompt, p) in enumerate(zip(ids, batch, per_prompt, strict=True)):
                self.engine.add_request(
                    request_id,
                    prompt,
                    p,
                    tenant=tenants[i] if tenants is not None else "default",
                    weight=weights[i] if weights is not None else 1.0,
                )
        except Exception:
            for request_id in ids:
                self.engine.abort_request(request_id)
            raise
        finished: dict[str, RequestOutput] = {}
        try:
            while self.engine.has_unfinished_requests():
                for output in self.engine.step():
                    if output.finished:
                        finished[output.request_id] = output
        except BaseException:
            for request_id in ids:  # a failed step (or ^C) leaves nothing queued behind
                self.engine.abort_request(request_id)
            raise
        return [finished[request_id] for request_id in ids]

    def chat(
        self,
        messages: list[dict[str, Any]] | list[list[dict[str, Any]]],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        **template_kwargs: Any,
    ) -> list[RequestOutput]:
        """Render each conversation with the model's chat template, then generate."""
        conversations = cast(
            list[list[dict[str, Any]]],
            [messages] if messages and isinstance(messages[0], dict) else messages,
        )
        prompts = [
            self.engine.tokenizer.encode(
                self.engine.tokenizer.apply_chat_template(
                    conversation, add_generation_prompt=True, **template_kwargs
                ),
                add_special_tokens=False,
            )
            for conversation in conversations
        ]
        return self.generate(prompts, params)


def _as_prompt_list(prompts: Prompt | Sequence[Prompt]) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    items = list(prompts)
    if items and all(isinstance(t, int) for t in items):
        return [cast(list[int], items)]  # one prompt given as token ids
    if any(isinstance(p, int) for p in items):
        raise ValueError("prompts must be strings or lists of token ids, not a mix")
    return cast(list[Prompt], items)
