"""LLMEngine: the step loop that ties scheduler, model runner, sampler and text together."""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections.abc import Sequence as Seq
from pathlib import Path

import torch

from inference.config import CacheConfig, SchedulerConfig
from inference.engine.draft_model import load_draft_model
from inference.engine.engine_config import EngineConfig
from inference.engine.malloc_tuning import keep_freed_memory_for_reuse
from inference.engine.model_loading import load_engine_model
from inference.engine.model_runner import ModelRunner
from inference.engine.prefix_pins import Pin
from inference.engine.request_state import RequestState, SampleState, new_request_state
from inference.engine.scheduler import Scheduler
from inference.engine.scheduler_output import ScheduledSequence
from inference.engine.spec_decode import make_spec_decoder
from inference.grammar.compiler import GrammarCompiler
from inference.grammar.masks import MaskFiller
from inference.grammar.step import advance, constrained_rows
from inference.grammar.tokenizer import ll_tokenizer
from inference.kernels.cpu.build import prebuild_in_background
from inference.kernels.kv_cache import FP8_KV_DTYPE
from inference.model.arch import ArchConfig
from inference.model.loader import checkpoint_kv_scales, num_kv_cache_bytes_per_token
from inference.model.loader.gguf import read_gguf
from inference.outputs import RequestOutput
from inference.parallel.group import TensorParallelGroup
from inference.sampling.params import SamplingParams
from inference.sampling.sampler import Sampler, make_generator, token_logprobs
from inference.sampling.speculative import Verified, verify
from inference.startup import phase
from inference.text.tokenizer import Tokenizer

log = logging.getLogger("inference.engine")


class LLMEngine:
    def __init__(self, config: EngineConfig) -> None:
        self.tp: TensorParallelGroup | None = None
        try:
            self._start(config)
        except BaseException:
            self.close()  # no tensor-parallel rank outlives a failed start
            raise

    def _start(self, config: EngineConfig) -> None:
        self.config = config
        self.device = _pick_device(config.device)
        if self.device.type == "cpu":
            keep_freed_memory_for_reuse()
            if config.attention_backend in ("auto", "cpu"):
                prebuild_in_background()  # the compiler runs beside the weights' loading
        loaded = load_engine_model(config, self.device)
        self.model, self.arch, self.tp, gguf = loaded.model, loaded.arch, loaded.tp, loaded.gguf
        self.dtype = self.model.dtype
        self.kv_dtype = FP8_KV_DTYPE if config.kv_cache_dtype == "fp8" else self.dtype
        with phase("tokenizer"):
            if gguf is not None and config.tokenizer is None:
                self.tokenizer = Tokenizer.from_parts(
                    gguf.tokenizer, gguf.tokenizer_config, gguf.generation_config
                )
            else:
                self.tokenizer = load_tokenizer(config.tokenizer or config.model)
        self.eos_token_ids = self.tokenizer.eos_token_ids
        self.max_model_len = _max_model_len(config.max_model_len, self.arch)
        # A draft model (speculative="draft") is loaded before the KV pools are sized.
        self.draft = None
        if config.draft_model is not None:
            self.draft = load_draft_model(config, self.device, self.tokenizer, self.arch)
        num_blocks = self._num_kv_blocks()
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens or 2048,
                max_model_len=self.max_model_len,
                step_time_budget_ms=config.step_time_budget_ms,
            ),
            CacheConfig(
                block_size=config.block_size,
                num_blocks=num_blocks,
                enable_prefix_caching=config.enable_prefix_caching,
                max_pinned_fraction=config.max_pinned_fraction,
            ),
        )
        self.runner = ModelRunner(
            self.model,
            self.arch if self.tp is None else self.tp.local_arch(),
            num_blocks=num_blocks,
            block_size=config.block_size,
            kv_dtype=self.kv_dtype,
            device=self.device,
            kv_scales=checkpoint_kv_scales(self.model) if config.kv_cache_dtype == "fp8" else None,
            attention_backend=config.attention_backend,
            enforce_eager=config.enforce_eager or self.tp is not None,  # no graphs over ranks
            max_num_seqs=config.max_num_seqs,
            max_model_len=self.max_model_len,
        )
        if self.tp is not None:
            self.tp.allocate_kv_cache(num_blocks, self.max_model_len)
            self.runner.broadcast_step = self.tp.broadcast
        self.sampler = Sampler(self.arch.vocab_size)
        self.spec = make_spec_decoder(
            config, self.max_model_len, self.draft, num_blocks, self.device
        )
        # Structured outputs: grammars compiled on first use, masks filled beside the forward.
        self.grammars = GrammarCompiler(lambda: ll_tokenizer(self.tokenizer, self.arch.vocab_size))
        self.masks = MaskFiller(self.arch.vocab_size)
        self._requests: dict[str, RequestState] = {}
        self._samples: dict[int, SampleState] = {}
        log.info(
            "KV cache: %d blocks of %d tokens = %d tokens (kv %s, %d bytes/token; "
            "weights %s%s; %s)",
            num_blocks,
            config.block_size,
            num_blocks * config.block_size,
            str(self.kv_dtype).removeprefix("torch."),
            self.kv_bytes_per_token,
            str(self.dtype).removeprefix("torch."),
            " with fp8 linears" if self.model_is_fp8 else "",
            self.device,
        )

    @property
    def kv_capacity_tokens(self) -> int:
        return self.scheduler.block_manager.capacity_tokens

    @property
    def kv_bytes_per_token(self) -> int:
        """On one rank: with tensor parallelism each holds 1/N of the KV heads."""
        per_token = num_kv_cache_bytes_per_token(self.arch, self.kv_dtype)
        return per_token // self.config.tensor_parallel_size

    def close(self) -> None:
        """Stop the tensor-parallel ranks, if any; a one-process engine holds nothing to stop."""
        if self.tp is not None:
            self.tp.close()
        if hasattr(self, "masks"):
            self.masks.close()
            self.grammars.close()

    @property
    def model_is_fp8(self) -> bool:
        return any(p.dtype == torch.float8_e4m3fn for p in self.model.parameters())

    def _num_kv_blocks(self) -> int:
        # One budget for the target's pool and the draft's, if any.
        per_token = self.kv_bytes_per_token
        if self.draft is not None:
            per_token += self.draft.kv_bytes_per_target_token
        budget = self.config.kv_cache_memory_bytes
        if budget is None:
            default_fraction = 0.9 if self.device.type == "cuda" else 0.1
            fraction = self.config.kv_cache_memory_fraction or default_fraction
            budget = int(_free_memory_bytes(self.device) * fraction)
            # Never more than every sequence at full length could use, twice over (the rest
            # keeps prefixes cached).
            budget = min(budget, 2 * self.config.max_num_seqs * self.max_model_len * per_token)
        num_blocks = budget // (per_token * self.config.block_size)
        if num_blocks < 1:
            raise ValueError(
                f"KV cache budget of {budget} bytes holds no block of {self.config.block_size} "
                f"tokens ({per_token} bytes per token)"
            )
        return int(num_blocks)

    # -- requests -------------------------------------------------------------------------

    def add_request(
        self,
        request_id: str,
        prompt: str | Seq[int],
        params: SamplingParams,
        *,
        tenant: str = "default",
        weight: float = 1.0,
    ) -> None:
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if isinstance(prompt, str):
            text: str | None = prompt
            token_ids = self.tokenizer.encode(prompt)
        else:
            text, token_ids = None, [int(t) for t in prompt]
        if not token_ids:
            raise ValueError("prompt must contain at least one token")
        bad = [t for t in token_ids if not 0 <= t < self.arch.vocab_size]
        if bad:
            raise ValueError(f"prompt token id {bad[0]} is outside the vocabulary")
        # GrammarError (a ValueError) before anything is queued; a hit in the server's cache.
        grammar = None if params.constraint is None else self.grammars.compile(params.constraint)
        state = new_request_state(
            request_id,
            text,
            token_ids,
            params,
            self.tokenizer,
            self.eos_token_ids,
            tenant=tenant,
            weight=weight,
            make_generator=lambda seed: make_generator(seed, self.device),
            new_matcher=None if grammar is None else grammar.deep_copy,
        )
        if params.prompt_logprobs is not None:
            state.prompt_logprobs = [None]
        # The samples share one prompt, so the first add() raises before anything is queued
        # if the prompt cannot fit.
        for sample in state.samples:
            self.scheduler.add(sample.seq)
            self._samples[sample.seq.seq_id] = sample
        self._requests[request_id] = state

    def abort_request(self, request_id: str) -> None:
        state = self._requests.pop(request_id, None)
        if state is None:
            return
        self.scheduler.abort(request_id)  # which marks its samples finished ("abort")
        for sample in state.samples:
            self._samples.pop(sample.seq.seq_id, None)

    def has_unfinished_requests(self) -> bool:
        return bool(self._requests)

    # -- pinned prefixes (call between steps: from the engine thread when served) -----------

    def pin_prefix(self, token_ids: Seq[int], *, only_if_cached: bool = False) -> Pin | None:
        """Pin the cached full blocks of a prompt that has been prefilled (see
        Scheduler.pin_prefix); PinCapacityError, pinning nothing, past the cap."""
        return self.scheduler.pin_prefix(token_ids, only_if_cached=only_if_cached)

    def unpin_prefix(self, pin_id: str) -> Pin:
        """KeyError for an unknown id."""
        return self.scheduler.unpin_prefix(pin_id)

    def pinned_prefixes(self) -> list[Pin]:
        return list(self.scheduler.block_manager.pins.values())

    @property
    def num_unfinished_requests(self) -> int:
        return len(self._requests)

    # -- the step -------------------------------------------------------------------------

    def _sample(self, sampling: list[ScheduledSequence], logits: torch.Tensor) -> list[Verified]:
        """The tokens each sampling sequence gets this step, in order: one from the plain
        sampler, or from the verifier for a verify step's rows."""
        starts = list(itertools.accumulate((item.num_sample_rows for item in sampling), initial=0))
        plain = [i for i, item in enumerate(sampling) if not item.spec_token_ids]
        results: list[Verified | None] = [None] * len(sampling)
        if plain:
            rows = [self._samples[sampling[i].seq.seq_id].sampling_row() for i in plain]
            some = len(plain) < len(sampling)
            sampled = self.sampler(logits[[starts[i] for i in plain]] if some else logits, rows)
            for i, token_id, lp in zip(plain, sampled.token_ids, sampled.logprobs, strict=True):
                results[i] = Verified([token_id], [lp], 0)
        for i, item in enumerate(sampling):
            if item.spec_token_ids:
                row = self._samples[item.seq.seq_id].sampling_row()
                rows_logits = logits[starts[i] : starts[i + 1]]
                results[i] = verify(self.sampler, rows_logits, row, item.spec_token_ids)
        return [r for r in results if r is not None]

    def step(self) -> list[RequestOutput]:
        """Run one scheduled batch; return the outputs of requests that made progress."""
        started = time.perf_counter()
        proposals = self.spec.propose(self.scheduler.running) if self.spec is not None else None
        batch = self.scheduler.schedule(proposals)
        if batch.is_empty:
            return []
        want_prompt_logits = {
            item.seq.seq_id
            for item in batch.scheduled
            if item.seq.params.prompt_logprobs is not None and item.seq.sample_index == 0
        }
        sampling = [item for item in batch.scheduled if item.sample]
        samples = [self._samples[item.seq.seq_id] for item in sampling]
        # The constrained rows' masks are filled on another thread during the forward pass.
        # Constrained samples never verify (see SpecDecoder.propose), but a verify step
        # before them shifts their logits row.
        starts = list(itertools.accumulate((item.num_sample_rows for item in sampling), initial=0))
        masks = self.masks.start([(starts[i], m) for i, m in constrained_rows(samples)])
        one_time_steps = self.runner.one_time_steps
        try:
            result = self.runner.execute(batch, want_prompt_logits=want_prompt_logits)
        except BaseException:
            self.scheduler.block_manager.step_failed()
            raise
        self.scheduler.block_manager.step_written()
        self.scheduler.update_after_step(batch)
        touched: dict[str, RequestState] = {}
        for index, (positions, logits) in result.prompt_logits.items():
            seq = batch.scheduled[index].seq
            state = self._requests[seq.request_id]
            targets = torch.tensor([seq.token_ids[p + 1] for p in positions])
            if state.prompt_logprobs is not None:
                k = seq.params.prompt_logprobs or 0
                state.prompt_logprobs.extend(token_logprobs(logits, targets, k))

        if sampling:
            self.masks.apply(masks, result.logits)
            now = time.monotonic()
            verified_all = self._sample(sampling, result.logits)
            for item, sample, verified in zip(sampling, samples, verified_all, strict=True):
                state = self._requests[item.seq.request_id]
                if state.first_token_time is None:
                    state.first_token_time = now
                # An accepted run is cut at the first token that ends the sample.
                for token_id, lp in zip(verified.token_ids, verified.logprobs, strict=True):
                    verdict = None if sample.matcher is None else advance(sample, token_id)
                    reason = sample.accept(token_id, lp, self.eos_token_ids, self.max_model_len)
                    if reason is None and verdict is not None:
                        reason = sample.end_of_grammar(verdict)
                    if reason is not None:
                        self.scheduler.finish(item.seq, reason)
                        break
                if item.spec_token_ids and self.spec is not None:
                    self.spec.stats.record(len(item.spec_token_ids), verified.num_accepted)
                    self.scheduler.accept_speculated(item.seq, verified.num_accepted)
                touched[state.request_id] = state
        if self.runner.one_time_steps == one_time_steps:  # not a step that recorded a graph
            self.scheduler.record_step_time(batch, time.perf_counter() - started)
        if self.spec is not None:  # a draft's KV of finished or preempted sequences
            self.spec.proposer.retain(self.scheduler.running)
        outputs = [state.output() for state in touched.values()]
        for state in touched.values():
            if state.finished:
                del self._requests[state.request_id]
                for sample in state.samples:
                    self._samples.pop(sample.seq.seq_id, None)
        return outputs


def _max_model_len(asked: int | None, arch: ArchConfig) -> int:
    """The context limit: what was asked, else the model's; never past a sliding window.

    Attention here is over the whole context, which for a sliding-window model (Mistral
    7B v0.1) is the model's own attention only up to the window: longer contexts would
    silently give different results, so they are refused.
    """
    limit = arch.max_position_embeddings
    if asked is not None and asked > limit:
        raise ValueError(
            f"max_model_len {asked} exceeds the model's max_position_embeddings {limit}"
        )
    window = arch.sliding_window
    if window is not None and (asked or limit) > window:
        if asked is not None:
            raise ValueError(
                f"max_model_len {asked} exceeds the model's sliding window of {window} "
                "tokens; sliding-window attention is not implemented, so contexts are "
                f"limited to {window}"
            )
        log.warning(
            "the model attends within a sliding window of %d tokens, which is not "
            "implemented: max_model_len is %d instead of %d",
            window,
            window,
            limit,
        )
        return window
    return asked or limit


def load_tokenizer(path: str) -> Tokenizer:
    if path.endswith(".gguf"):
        ckpt = read_gguf(path)
        return Tokenizer.from_parts(ckpt.tokenizer, ckpt.tokenizer_config, ckpt.generation_config)
    if not Path(path).is_dir():
        raise ValueError(f"model path {path!r} is neither a directory nor a .gguf file")
    return Tokenizer.from_dir(path)


def _pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no CUDA device")
    return torch.device(name)


def _free_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
