"""The model runner: the one place that turns a scheduled batch into tensors.

It owns the KV cache tensors (one key and one value pool per layer, indexed by the block
ids the block manager hands out) and runs the model on a flat batch that mixes prefill
chunks and decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from inference.engine.cpu_graphs import CpuDecodeGraphRunner, make_cpu_decode_graphs
from inference.engine.cuda_graphs import DecodeGraphRunner, make_decode_graphs
from inference.engine.scheduler_output import SchedulerOutput
from inference.engine.step_inputs import StepInputs, prepare_step
from inference.kernels.attention import KVCache
from inference.kernels.kv_cache import zeroed_pool
from inference.kernels.profile import choose_device_profile
from inference.model.arch import ArchConfig
from inference.model.llama import LlamaForCausalLM
from inference.startup import phase


@dataclass(frozen=True, slots=True)
class StepResult:
    """Logits for the scheduled sequences that sample this step, in scheduling order."""

    logits: torch.Tensor  # (num_sampling, vocab) float32
    # For sequences asking for prompt logprobs: scheduled index -> (positions, logits) where
    # logits[i] predicts token at positions[i] + 1.
    prompt_logits: dict[int, tuple[range, torch.Tensor]]


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        arch: ArchConfig,
        *,
        num_blocks: int,
        block_size: int,
        kv_dtype: torch.dtype,
        device: torch.device,
        kv_scales: list[tuple[float, float]] | None = None,
        attention_backend: str = "auto",
        enforce_eager: bool = False,
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
    ) -> None:
        """``kv_scales``: per-layer (k_scale, v_scale) of an FP8 pool (default 1.0).

        ``attention_backend`` is chosen for ``device`` (Triton on CUDA by default); decode
        steps replay CUDA graphs on CUDA, and recordings of their C kernel calls on the CPU
        (cpu_graphs.py), unless ``enforce_eager`` (both need ``max_model_len`` to size
        their block tables).
        """
        self.model = model
        self.arch = arch
        self.block_size = block_size
        self.device = device
        shape = (num_blocks, block_size, arch.num_kv_heads, arch.head_dim)
        scales = kv_scales or [(1.0, 1.0)] * arch.num_layers
        if len(scales) != arch.num_layers:
            raise ValueError(f"need KV scales for {arch.num_layers} layers, got {len(scales)}")
        with phase("kv_cache"):
            self.kv_caches: list[KVCache] = [
                KVCache(
                    zeroed_pool(shape, kv_dtype, device),
                    zeroed_pool(shape, kv_dtype, device),
                    k_scale=k_scale,
                    v_scale=v_scale,
                )
                for k_scale, v_scale in scales
            ]
        if device.type == "cpu":
            with phase("prepack"):
                model.prepack_for_cpu(batch_hint=max_num_seqs)  # decode steps' rows
        # Every device-dependent choice, made (and probed) once, then swapped into the model.
        with phase("device_profile"):
            self.profile = choose_device_profile(attention_backend, device, model.dtype)
        self.attention_backend = self.profile.attention
        model.use_device_profile(self.profile)
        with phase("cuda_graphs"):
            self.decode_graphs: DecodeGraphRunner | CpuDecodeGraphRunner | None = None
            for make in (make_decode_graphs, make_cpu_decode_graphs):
                self.decode_graphs = self.decode_graphs or make(
                    model,
                    self.kv_caches,
                    self.attention_backend,
                    enforce_eager=enforce_eager,
                    max_num_seqs=max_num_seqs,
                    max_model_len=max_model_len,
                    block_size=block_size,
                    device=device,
                )
        # Set by a tensor-parallel group: sends each eager step's inputs to the other ranks.
        self.broadcast_step: Callable[[StepInputs], None] | None = None

    @property
    def one_time_steps(self) -> int:
        """How many steps so far recorded or captured a decode graph: such a step takes
        far longer than its shape will again (50-100 ms on the CPU for the demo model,
        several replays), so the scheduler's cost model leaves it out."""
        return 0 if self.decode_graphs is None else self.decode_graphs.recording_steps

    @torch.inference_mode()
    def forward_step(self, step: StepInputs) -> torch.Tensor:
        """Run the model eagerly on one step's host inputs; the final hidden states (T, hidden).

        Tensor-parallel workers call this with the `StepInputs` rank 0 broadcast.
        """
        meta = self.attention_backend.build_metadata(step, self.device)
        hidden: torch.Tensor = self.model(
            torch.from_numpy(step.input_ids).to(self.device),
            torch.from_numpy(step.positions).to(self.device),
            self.kv_caches,
            meta,
        )
        return hidden

    @torch.inference_mode()
    def execute(self, batch: SchedulerOutput, *, want_prompt_logits: set[int]) -> StepResult:
        """Run one step. ``want_prompt_logits`` holds the seq_ids that need prompt logits."""
        step = prepare_step(batch, self.block_size)
        hidden: torch.Tensor | None = None
        graphs = self.decode_graphs
        width = step.block_tables.shape[1]
        if graphs is not None and step.is_pure_decode and graphs.can_run(step.num_seqs, width):
            hidden = graphs.run(step)  # None: run this step eagerly after all
        if hidden is None:
            if self.broadcast_step is not None:  # tensor parallel: the other ranks run it too
                self.broadcast_step(step)
            hidden = self.forward_step(step)
        logits = self.model.compute_logits(hidden[step.sample_rows])

        prompt_logits: dict[int, tuple[range, torch.Tensor]] = {}
        for index, item in enumerate(batch.scheduled):
            seq = item.seq
            if seq.seq_id not in want_prompt_logits:
                continue
            # Only positions whose next token is still a prompt token.
            stop = min(item.end, seq.num_prompt_tokens - 1)
            if stop <= item.start:
                continue
            lo = step.query_start_loc[index]
            rows = hidden[lo : lo + (stop - item.start)]
            prompt_logits[index] = (range(item.start, stop), self.model.compute_logits(rows))
        return StepResult(logits=logits, prompt_logits=prompt_logits)
