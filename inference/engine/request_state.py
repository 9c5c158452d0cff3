"""Per-request bookkeeping outside the scheduler: text, stop conditions, logprobs.

The scheduler knows blocks and token counts; this module knows what a token means for the
request: the text it adds, whether it stops the sample, and what the caller gets back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from inference.engine.sequence import Sequence
from inference.outputs import CompletionOutput, RequestOutput
from inference.sampling.params import SamplingParams
from inference.sampling.sampler import SamplingRow, TokenLogprobs
from inference.text.detokenizer import IncrementalDetokenizer
from inference.text.stop import StopStringMatcher
from inference.text.tokenizer import Tokenizer


@dataclass(eq=False)
class SampleState:
    """One sample (one Sequence) of a request, as the caller sees it."""

    seq: Sequence
    detokenizer: IncrementalDetokenizer
    stop_matcher: StopStringMatcher | None
    generator: torch.Generator | None
    blocked_until_min_tokens: frozenset[int]
    text: str = ""
    logprobs: list[TokenLogprobs] | None = None
    stop_reason: str | int | None = None
    # An llguidance matcher when the request is constrained; it advances with each token.
    matcher: Any = None

    _row: SamplingRow | None = None

    def sampling_row(self) -> SamplingRow:
        """The sampler's view of this sample, made once: it reads the sequence's own token
        list, which grows in place, so nothing is copied per step."""
        if self._row is None:
            seq = self.seq
            self._row = SamplingRow(
                params=seq.params,
                token_ids=seq.token_ids,
                num_prompt_tokens=seq.num_prompt_tokens,
                generator=self.generator,
                min_tokens_blocked_ids=self.blocked_until_min_tokens,
            )
        return self._row

    def accept(
        self,
        token_id: int,
        logprobs: TokenLogprobs | None,
        eos_token_ids: frozenset[int],
        max_model_len: int,
    ) -> str | None:
        """Append one sampled token; return the finish reason if it ends the sample."""
        seq, params = self.seq, self.seq.params
        seq.append_token(token_id)
        if logprobs is not None and self.logprobs is not None:
            self.logprobs.append(logprobs)
        num_out = seq.num_output_tokens
        if num_out >= params.min_tokens:
            if not params.ignore_eos and token_id in eos_token_ids:
                self.stop_reason = None
                self._flush()
                return "stop"
            if token_id in params.stop_token_ids:
                self.stop_reason = token_id
                self._flush()
                return "stop"
        delta = self.detokenizer.step(token_id)
        # Stop strings count only once min_tokens are out (as in vLLM): before that the text
        # goes straight through.
        if self.stop_matcher is not None and num_out >= params.min_tokens:
            delta, stopped = self.stop_matcher.feed(delta)
            self.text += delta
            if stopped:
                self.stop_reason = self.stop_matcher.matched
                return "stop"
        else:
            self.text += delta
        if (params.max_tokens is not None and num_out >= params.max_tokens) or len(
            seq
        ) >= max_model_len:
            self._flush()
            return "length"
        return None

    def end_of_grammar(self, verdict: str) -> str:
        """The grammar is complete ("stop"): the sample stops here. Any other verdict is
        why its matcher failed: the sample is cut off ("abort", the verdict as its
        stop_reason) rather than going on unconstrained."""
        self._flush()
        if verdict == "stop":
            self.stop_reason = None
            return "stop"
        self.stop_reason = verdict
        return "abort"

    def _flush(self) -> None:
        if self.stop_matcher is not None:
            self.text += self.stop_matcher.flush()

    def completion(self) -> CompletionOutput:
        seq = self.seq
        return CompletionOutput(
            index=seq.sample_index,
            text=self.text,
            token_ids=list(seq.output_token_ids),
            logprobs=list(self.logprobs) if self.logprobs is not None else None,
            finish_reason=seq.finish_reason,
            stop_reason=self.stop_reason,
        )


@dataclass(eq=False)
class RequestState:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    params: SamplingParams
    samples: list[SampleState]
    arrival_time: float = field(default_factory=time.monotonic)
    first_token_time: float | None = None
    prompt_logprobs: list[TokenLogprobs | None] | None = None

    @property
    def finished(self) -> bool:
        return all(s.seq.is_finished for s in self.samples)

    def output(self) -> RequestOutput:
        metrics = {"arrival_time": self.arrival_time}
        if self.first_token_time is not None:
            metrics["time_to_first_token"] = self.first_token_time - self.arrival_time
        return RequestOutput(
            request_id=self.request_id,
            prompt=self.prompt,
            prompt_token_ids=self.prompt_token_ids,
            outputs=[s.completion() for s in self.samples],
            finished=self.finished,
            num_cached_tokens=min(s.seq.num_cached_tokens for s in self.samples),
            prompt_logprobs=self.prompt_logprobs,
            metrics=metrics,
        )


def new_request_state(
    request_id: str,
    prompt: str | None,
    prompt_token_ids: list[int],
    params: SamplingParams,
    tokenizer: Tokenizer,
    eos_token_ids: frozenset[int],
    *,
    tenant: str,
    weight: float,
    make_generator: Callable[[int | None], torch.Generator | None],
    new_matcher: Callable[[], Any] | None = None,
) -> RequestState:
    """Build the request's n samples. ``make_generator(seed)`` gives a per-sample generator;
    ``new_matcher()`` a grammar matcher of its own for each sample of a constrained request."""
    samples: list[SampleState] = []
    now = time.monotonic()
    for index in range(params.n):
        seq = Sequence(
            request_id=request_id,
            token_ids=list(prompt_token_ids),
            params=params,
            sample_index=index,
            tenant=tenant,
            weight=weight,
            arrival_time=now,
        )
        # Sample i of a seeded request gets seed+i: reproducible and still distinct.
        seed = None if params.seed is None else params.seed + index
        samples.append(
            SampleState(
                seq=seq,
                detokenizer=IncrementalDetokenizer(
                    tokenizer, prompt_token_ids, params.skip_special_tokens
                ),
                stop_matcher=StopStringMatcher(params.stop) if params.stop else None,
                generator=make_generator(seed),
                blocked_until_min_tokens=(
                    frozenset(params.stop_token_ids) | eos_token_ids
                    if params.min_tokens
                    else frozenset()
                ),
                logprobs=[] if params.logprobs is not None else None,
                matcher=new_matcher() if new_matcher is not None else None,
            )
        )
    return RequestState(
        request_id=request_id,
        prompt=prompt,
        prompt_token_ids=list(prompt_token_ids),
        params=params,
        samples=samples,
        arrival_time=now,
    )
