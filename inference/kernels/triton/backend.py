"""TritonAttentionBackend: the GPU path behind `AttentionBackend`.

A step's metadata is turned into a few small device tensors once (the plan) and reused by
every layer: the model calls the backend once per layer with the same metadata object.
Decodes (one new token) go to the paged decode kernel, longer chunks to the chunk kernel,
and new keys and values are written by `reshape_and_cache`, all straight on the pools.

A CUDA graph captures a forward whose plan it made itself from static buffers (`bind`), so
that replays read the current lengths and block tables instead of the ones at capture.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.kernels.attention import AttentionMetadata
from inference.kernels.kv_cache import kv_scales
from inference.kernels.triton.chunk_attention import chunk_attention
from inference.kernels.triton.decode_attention import paged_decode_attention
from inference.kernels.triton.kv_write import reshape_and_cache

# Programs per SM that keep a GPU busy when decode splits are planned.
PROGRAMS_PER_SM = 4
# Under the interpreter (no GPU) a few programs are plenty and keep tests fast.
CPU_TARGET_PROGRAMS = 8


@dataclass(frozen=True, slots=True)
class StepPlan:
    """The device tensors and bounds one step's kernels need (int32, on the pools' device)."""

    seq_lens: torch.Tensor  # (B,) context length after this step
    query_start_loc: torch.Tensor  # (B + 1,)
    decode_seq_idx: torch.Tensor  # (Bd,) which sequences decode
    decode_rows: torch.Tensor  # (Bd,) their token rows
    max_decode_len: int  # bound on the decodes' contexts
    prefill_seq_idx: torch.Tensor  # (Bp,) which sequences run a chunk
    max_query_len: int  # bound on the chunks' lengths

    @classmethod
    def from_metadata(cls, meta: AttentionMetadata, device: torch.device) -> StepPlan:
        """One host-to-device copy of everything, from the metadata's host-side lists."""
        num_seqs = len(meta.seq_lens)
        decode_rows = [meta.query_start_loc[i] for i in meta.decode_seqs]
        packed = torch.tensor(
            [
                *meta.seq_lens,
                *meta.query_start_loc,
                *meta.decode_seqs,
                *decode_rows,
                *meta.prefill_seqs,
            ],
            dtype=torch.int32,
        ).to(device, non_blocking=True)
        num_decodes = len(meta.decode_seqs)
        seq_lens, query_start_loc, decode_seq_idx, rows, prefill_seq_idx = packed.split(
            [num_seqs, num_seqs + 1, num_decodes, num_decodes, len(meta.prefill_seqs)]
        )
        query_lens = [
            meta.query_start_loc[i + 1] - meta.query_start_loc[i] for i in range(num_seqs)
        ]
        return cls(
            seq_lens=seq_lens,
            query_start_loc=query_start_loc,
            decode_seq_idx=decode_seq_idx,
            decode_rows=rows,
            max_decode_len=max((meta.seq_lens[i] for i in meta.decode_seqs), default=0),
            prefill_seq_idx=prefill_seq_idx,
            max_query_len=max((query_lens[i] for i in meta.prefill_seqs), default=0),
        )


class TritonAttentionBackend:
    """Triton kernels over the paged pools; matches `TorchAttentionBackend`.

    ``target_programs`` (default: a few per SM on CUDA, 8 elsewhere) decides how finely
    decode contexts are split; the block sizes are the kernels' tiles.
    """

    def __init__(
        self,
        *,
        target_programs: int | None = None,
        decode_block_n: int = 64,
        chunk_block_m: int = 64,
        chunk_block_n: int = 64,
    ) -> None:
        self.target_programs = target_programs
        self.decode_block_n = decode_block_n
        self.chunk_block_m = chunk_block_m
        self.chunk_block_n = chunk_block_n
        self._plan: tuple[AttentionMetadata, StepPlan] | None = None
        self._scales: dict[tuple[torch.device, float], torch.Tensor] = {}

    def bind(self, meta: AttentionMetadata, plan: StepPlan) -> None:
        """Use ``plan`` for ``meta`` (a CUDA graph's static buffers) instead of deriving one."""
        self._plan = (meta, plan)

    def plan(self, meta: AttentionMetadata, device: torch.device) -> StepPlan:
        # Held by reference, so a new step's metadata can never be mistaken for this one.
        if self._plan is None or self._plan[0] is not meta:
            self._plan = (meta, StepPlan.from_metadata(meta, device))
        return self._plan[1]

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor],
        slot_mapping: torch.Tensor,
    ) -> None:
        key_cache, value_cache = cache
        k_scale, v_scale = self._scale_tensors(cache, key_cache.device)
        reshape_and_cache(key, value, key_cache, value_cache, slot_mapping, k_scale, v_scale)

    def forward(
        self,
        query: torch.Tensor,
        cache: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """query (T, Hq, D) -> attention output (T, Hq, D) over each sequence's context."""
        key_cache, value_cache = cache
        plan = self.plan(meta, query.device)
        k_scale, v_scale = self._scale_tensors(cache, query.device)
        out = torch.empty_like(query)
        paged_decode_attention(
            query,
            out,
            key_cache,
            value_cache,
            meta.block_tables,
            plan.seq_lens,
            plan.decode_seq_idx,
            plan.decode_rows,
            scale,
            max_seq_len=plan.max_decode_len,
            k_scale=k_scale,
            v_scale=v_scale,
            block_n=self.decode_block_n,
            target_programs=self._target_programs(query.device),
        )
        chunk_attention(
            query,
            out,
            key_cache,
            value_cache,
            meta.block_tables,
            plan.seq_lens,
            plan.query_start_loc,
            plan.prefill_seq_idx,
            scale,
            max_query_len=plan.max_query_len,
            k_scale=k_scale,
            v_scale=v_scale,
            block_m=self.chunk_block_m,
            block_n=self.chunk_block_n,
        )
        return out

    def _target_programs(self, device: torch.device) -> int:
        if self.target_programs is None:
            if device.type == "cuda":
                sms = torch.cuda.get_device_properties(device).multi_processor_count
                self.target_programs = PROGRAMS_PER_SM * sms
            else:
                self.target_programs = CPU_TARGET_PROGRAMS
        return self.target_programs

    def _scale_tensors(
        self, cache: tuple[torch.Tensor, torch.Tensor], device: torch.device
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """An FP8 pool's scales as one-element device tensors, made once per value.

        Made on first use, which is the eager warm-up before a CUDA graph captures.
        """
        if cache[0].dtype != torch.float8_e4m3fn:
            return None, None
        tensors = []
        for value in kv_scales(cache):
            key = (device, value)
            if key not in self._scales:
                self._scales[key] = torch.tensor([value], dtype=torch.float32, device=device)
            tensors.append(self._scales[key])
        return tensors[0], tensors[1]
