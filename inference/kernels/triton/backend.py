"""TritonAttentionBackend: the GPU path behind `AttentionBackend`.

A step's layout is turned into a few small device tensors once (`build_metadata`) and
reused by every layer: the model calls the backend once per layer with the same metadata.
Decodes (one new token) go to the paged decode kernel, longer chunks to the chunk kernel,
and new keys and values are written by `reshape_and_cache`, all straight on the pools.

A CUDA graph captures a forward over metadata whose tensors are its own static buffers
(`DecodeBuffers`), so that replays read the current lengths and block tables instead of
the ones at capture.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.kernels.attention import PagedLayout
from inference.kernels.kv_cache import kv_scales
from inference.kernels.triton.chunk_attention import chunk_attention
from inference.kernels.triton.decode_attention import paged_decode_attention
from inference.kernels.triton.kv_write import reshape_and_cache

# Programs per SM that keep a GPU busy when decode splits are planned.
PROGRAMS_PER_SM = 4
# Under the interpreter (no GPU) a few programs are plenty and keep tests fast.
CPU_TARGET_PROGRAMS = 8


@dataclass(frozen=True, slots=True)
class TritonAttentionMetadata:
    """The device tensors and bounds one step's kernels need (int32 unless said, on the
    pools' device): everything this backend reads, made once per step."""

    slot_mapping: torch.Tensor  # (T,) int64
    block_tables: torch.Tensor  # (B, max_blocks) int64
    seq_lens: torch.Tensor  # (B,) context length after this step
    query_start_loc: torch.Tensor  # (B + 1,)
    decode_seq_idx: torch.Tensor  # (Bd,) which sequences decode
    decode_rows: torch.Tensor  # (Bd,) their token rows
    max_decode_len: int  # bound on the decodes' contexts
    prefill_seq_idx: torch.Tensor  # (Bp,) which sequences run a chunk
    max_query_len: int  # bound on the chunks' lengths


def build_triton_metadata(layout: PagedLayout, device: torch.device) -> TritonAttentionMetadata:
    """One host-to-device copy of the int32 fields, from the layout's host-side lists."""
    num_seqs = layout.num_seqs
    decode_seqs, prefill_seqs = layout.decode_seqs, layout.prefill_seqs
    decode_rows = [layout.query_start_loc[i] for i in decode_seqs]
    packed = torch.tensor(
        [*layout.seq_lens, *layout.query_start_loc, *decode_seqs, *decode_rows, *prefill_seqs],
        dtype=torch.int32,
    ).to(device, non_blocking=True)
    num_decodes = len(decode_seqs)
    seq_lens, query_start_loc, decode_seq_idx, rows, prefill_seq_idx = packed.split(
        [num_seqs, num_seqs + 1, num_decodes, num_decodes, len(prefill_seqs)]
    )
    return TritonAttentionMetadata(
        slot_mapping=torch.from_numpy(layout.slots).to(device),
        block_tables=torch.from_numpy(layout.block_tables).to(device),
        seq_lens=seq_lens,
        query_start_loc=query_start_loc,
        decode_seq_idx=decode_seq_idx,
        decode_rows=rows,
        max_decode_len=max((layout.seq_lens[i] for i in decode_seqs), default=0),
        prefill_seq_idx=prefill_seq_idx,
        max_query_len=max((layout.query_len(i) for i in prefill_seqs), default=0),
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
        self._scales: dict[tuple[torch.device, float], torch.Tensor] = {}

    def build_metadata(self, layout: PagedLayout, device: torch.device) -> TritonAttentionMetadata:
        return build_triton_metadata(layout, device)

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
        meta: TritonAttentionMetadata,
        scale: float,
    ) -> torch.Tensor:
        """query (T, Hq, D) -> attention output (T, Hq, D) over each sequence's context."""
        key_cache, value_cache = cache
        k_scale, v_scale = self._scale_tensors(cache, query.device)
        out = torch.empty_like(query)
        paged_decode_attention(
            query,
            out,
            key_cache,
            value_cache,
            meta.block_tables,
            meta.seq_lens,
            meta.decode_seq_idx,
            meta.decode_rows,
            scale,
            max_seq_len=meta.max_decode_len,
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
            meta.seq_lens,
            meta.query_start_loc,
            meta.prefill_seq_idx,
            scale,
            max_query_len=meta.max_query_len,
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
