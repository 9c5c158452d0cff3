"""The CPU attention backend: decodes and prefill chunks through C kernels.

Decode steps are where the torch path spends its time on a CPU: it gathers every
sequence's whole context out of the pool (a copy of all of K and V each layer) before one
masked SDPA. The kernel in paged_decode.c reads the pool in place through the block
tables. Prefill chunks go through paged_prefill.h (flash-attention tiles over the pool in
place, bf16 dot products where the processor has them): on a Zen 5, 6x faster than torch's
SDPA on a 512-token bf16 chunk, 2x in float32. Not on a processor with AMX, where torch's
flash attention multiplies bf16 on the AMX tiles: on an Emerald Rapids Xeon its SDPA took a
2,048-token bf16 chunk in a third of the kernel's time, so there bf16 queries keep the
torch path (and the cascade), float32 ones the kernel (`torch_attention_uses_amx`). The
torch path is the reference both are tested against, and serves what the kernels do not
take (a head size that is not a multiple of 16, say).

Cascade (cascade.py): when the decodes share leading blocks (every chat that starts with
the same system prompt hits the same cached blocks), those are attended once for the whole
batch, and the kernel attends each sequence's own part and folds the two together. So are
prefill chunks that all follow the same cached blocks, where the chunk kernel does not take
them (it is faster than the cascade's torch attention even though it reads the shared keys
once per chunk).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import torch

from inference.kernels.attention import (
    PagedLayout,
    TorchAttentionBackend,
    TorchAttentionMetadata,
    build_torch_metadata,
)
from inference.kernels.cpu.cascade import fold, own_chunk_attention, shared_prefix_attention
from inference.kernels.cpu.features import torch_has_amx
from inference.kernels.cpu.threads import threads_for
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache, kv_scales

_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, FP8_KV_DTYPE: 3}
# Shorter shared prefixes are not worth a separate pass.
CASCADE_MIN_TOKENS = 64
# What paged_prefill.h takes (PF_MAX_DIM, PF_MAX_GROUP): larger heads or GQA groups keep
# the torch path.
PREFILL_KERNEL_MAX_HEAD_DIM, PREFILL_KERNEL_MAX_GROUP = 128, 32


@dataclass
class CpuAttentionMetadata:
    """The torch path's metadata (the kernel reads its decode rows, blocks and lengths; the
    torch fallback the rest) and the blocks that the cascade can read once for all."""

    base: TorchAttentionMetadata
    # Leading blocks that every decode's table shares (a cached system prompt, say), short
    # of each decode's last token; 0 with fewer than two decodes.
    decode_shared_blocks: int = 0
    # Leading blocks that every prefill chunk's table shares, all of them cached before the
    # chunks (a system prompt hit in the prefix cache); 0 with fewer than two chunks.
    prefill_shared_blocks: int = 0

    @property
    def slot_mapping(self) -> torch.Tensor:
        return self.base.slot_mapping


def build_cpu_metadata(layout: PagedLayout, device: torch.device) -> CpuAttentionMetadata:
    meta = CpuAttentionMetadata(build_torch_metadata(layout, device))
    base, tables = meta.base, layout.block_tables
    meta.decode_shared_blocks = decode_shared_blocks(layout, base.decode_seqs)
    if len(base.prefill_seqs) > 1:
        seqs = base.prefill_seqs
        cached = min(layout.seq_lens[i] - layout.query_len(i) for i in seqs) // layout.block_size
        if cached > 0:
            meta.prefill_shared_blocks = _leading_shared(tables[seqs, :cached], cached)
    return meta


def decode_shared_blocks(layout: PagedLayout, decode_seqs: list[int]) -> int:
    """Leading blocks that the tables of ``decode_seqs`` all share, short of each one's last
    token (what the cascade may attend once for all); 0 with fewer than two."""
    if len(decode_seqs) < 2:
        return 0
    lens = [layout.seq_lens[i] for i in decode_seqs]
    num_blocks = -(-max(lens) // layout.block_size)
    limit = (min(lens) - 1) // layout.block_size
    return _leading_shared(layout.block_tables[decode_seqs, :num_blocks], limit)


def cascade_blocks(shared_blocks: int, block_size: int) -> int:
    """The shared blocks the decode kernel's cascade takes (0: too few to pay)."""
    return shared_blocks if shared_blocks * block_size >= CASCADE_MIN_TOKENS else 0


def _leading_shared(tables: np.ndarray, limit: int) -> int:
    """How many leading columns of ``tables`` (rows of block ids) all rows agree on."""
    same = (tables == tables[:1]).all(axis=0)
    return min(int(same.cumprod().sum()), limit)


def torch_attention_uses_amx() -> bool:
    """Whether torch's CPU attention runs bf16 on AMX tiles here (its flash attention's
    matmuls go to oneDNN's brgemm, which uses them where the processor has them)."""
    return torch_has_amx()


class CpuAttentionBackend:
    def __init__(
        self, library: ctypes.CDLL, store: ctypes.CDLL, *, bf16_prefill_in_torch: bool | None = None
    ) -> None:
        """``library``: paged_decode.c; ``store``: kv_store.c (build.py loads both).
        ``bf16_prefill_in_torch``: bf16 prefill chunks skip the chunk kernel (by default
        where torch's attention uses AMX; the tests pin it either way)."""
        self._kernel = library.paged_decode_attention
        self._prefill_kernel = library.paged_prefill_attention
        # 0 in a build without AVX-512: prefill chunks keep the torch path there
        self._prefill_kernel_built = bool(library.paged_prefill_available())
        self.bf16_prefill_in_torch = (
            torch_attention_uses_amx() if bf16_prefill_in_torch is None else bf16_prefill_in_torch
        )
        self._store_kv = store.store_kv
        self._torch = TorchAttentionBackend()  # the reference, for what the kernels skip

    def build_metadata(self, layout: PagedLayout, device: torch.device) -> CpuAttentionMetadata:
        return build_cpu_metadata(layout, device)

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
    ) -> None:
        """Store key/value (T, Hkv, D) at their flat cache slots (kv_store.c; the torch path
        for tensors it does not take)."""
        key_cache, value_cache = cache
        pool = key_cache.dtype
        if (
            key.dtype not in _DTYPE_CODES
            or key.dtype == FP8_KV_DTYPE
            or value.dtype != key.dtype
            or (pool != key.dtype and pool != FP8_KV_DTYPE)
            or not _rows_of_heads(key)
            or not _rows_of_heads(value)
            or key.shape[1:] != key_cache.shape[2:]
            or value.shape != key.shape
            or not (key_cache.is_contiguous() and value_cache.is_contiguous())
            or slot_mapping.dtype != torch.int64
            or not slot_mapping.is_contiguous()
            or slot_mapping.shape != key.shape[:1]
            or not key.is_cpu
        ):
            self._torch.write_kv(key, value, cache, slot_mapping)
            return
        k_scale, v_scale = kv_scales(cache)
        width = key.shape[1] * key.shape[2]
        status = self._store_kv(
            key.data_ptr(),
            key.stride(0),
            value.data_ptr(),
            value.stride(0),
            _DTYPE_CODES[key.dtype],
            key_cache.data_ptr(),
            value_cache.data_ptr(),
            _DTYPE_CODES[pool],
            slot_mapping.data_ptr(),
            key.shape[0],
            width,
            key_cache.shape[0] * key_cache.shape[1],
            k_scale,
            v_scale,
            threads_for(2 * key.shape[0] * width),
        )
        if status != 0:
            raise IndexError(f"KV cache write failed with status {status} (a slot past the pool)")

    def forward(
        self, query: torch.Tensor, cache: KVCache, meta: CpuAttentionMetadata, scale: float
    ) -> torch.Tensor:
        """query (T, Hq, D) -> attention output (T, Hq, D) over each sequence's context."""
        num_heads, num_kv_heads = query.shape[1], cache[0].shape[2]
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} query heads do not group over {num_kv_heads}")
        out = torch.empty_like(query)
        if meta.base.decode_seqs:
            self.decode(query, cache, meta, scale, out)
        self.prefill(query, cache, meta, scale, out, meta.base.prefill_seqs)
        return out

    def decode(
        self,
        query: torch.Tensor,
        cache: KVCache,
        meta: CpuAttentionMetadata,
        scale: float,
        out: torch.Tensor,
    ) -> None:
        key_cache, value_cache = cache
        base = meta.base
        rows, blocks, lens = base.decode_rows, base.decode_blocks, base.decode_lens
        if rows is None or blocks is None or lens is None:
            return
        if (
            query.dtype not in _DTYPE_CODES
            or query.dtype == FP8_KV_DTYPE
            or key_cache.dtype not in _DTYPE_CODES
            or not _rows_of_heads(query)
            or not _rows_of_heads(out)
            or out.dtype != query.dtype
            or not (key_cache.is_contiguous() and value_cache.is_contiguous())
            or blocks.stride(1) != 1
        ):
            self._torch.decode(query, cache, base, scale, out)
            return
        k_scale, v_scale = kv_scales(cache)
        _, block_size, num_kv_heads, head_dim = key_cache.shape
        shared = cascade_blocks(meta.decode_shared_blocks, block_size)
        skip = shared * block_size
        prior: torch.Tensor | None = None
        prior_lse: torch.Tensor | None = None
        if shared:
            prior, prior_lse = shared_prefix_attention(
                query.index_select(0, rows), cache, blocks[0, :shared], scale
            )
        status = self._kernel(
            query.data_ptr(),
            query.stride(0),
            out.data_ptr(),
            out.stride(0),
            _DTYPE_CODES[query.dtype],
            rows.data_ptr(),
            key_cache.data_ptr(),
            value_cache.data_ptr(),
            _DTYPE_CODES[key_cache.dtype],
            blocks.data_ptr(),
            blocks.stride(0),
            lens.data_ptr(),
            lens.shape[0],
            query.shape[1],
            num_kv_heads,
            head_dim,
            block_size,
            scale,
            k_scale,
            v_scale,
            skip,
            0 if prior is None else prior.data_ptr(),
            0 if prior_lse is None else prior_lse.data_ptr(),
            torch.get_num_threads(),  # the kernel splits long contexts over them
        )
        if status != 0:
            raise RuntimeError(f"CPU paged-attention kernel failed with status {status}")

    def prefill(
        self,
        query: torch.Tensor,
        cache: KVCache,
        meta: CpuAttentionMetadata,
        scale: float,
        out: torch.Tensor,
        seqs: list[int],
    ) -> None:
        """Chunks go through the chunk kernel where it takes them (paged_prefill.h; 1.2-4.6x
        faster than the cascade on chunks after a shared prefix, see docs/engine.md); else
        those that are all of their context past the shared blocks through the cascade and
        the rest through the torch path."""
        if not seqs:  # a pure decode step: every layer comes here
            return
        base = meta.base
        if self._chunk_kernel_takes(query, cache, base, out):
            self._attend_chunks(query, cache, base, scale, out, seqs)
            return
        block_size = cache[0].shape[1]
        shared = meta.prefill_shared_blocks
        skip = shared * block_size
        starts = base.query_start_loc
        cascade = [i for i in seqs if base.seq_lens[i] - (starts[i + 1] - starts[i]) == skip]
        if skip < CASCADE_MIN_TOKENS or len(cascade) < 2:
            self._torch.prefill(query, cache, base, scale, out, seqs)
            return
        rows = torch.cat([torch.arange(starts[i], starts[i + 1]) for i in cascade])
        queries = query.index_select(0, rows)
        prior, prior_lse = shared_prefix_attention(
            queries, cache, base.block_tables[cascade[0], :shared], scale
        )
        at = 0
        for i in cascade:
            length = starts[i + 1] - starts[i]
            own_blocks = base.block_tables[i, shared : -(-base.seq_lens[i] // block_size)]
            own, own_lse = own_chunk_attention(queries[at : at + length], cache, own_blocks, scale)
            mine = slice(at, at + length)
            out[starts[i] : starts[i + 1]] = fold(prior[mine], prior_lse[mine], own, own_lse)
            at += length
        rest = [i for i in seqs if i not in cascade]
        if rest:
            self._torch.prefill(query, cache, base, scale, out, rest)

    def _chunk_kernel_takes(
        self, query: torch.Tensor, cache: KVCache, base: TorchAttentionMetadata, out: torch.Tensor
    ) -> bool:
        key_cache, value_cache = cache
        tables, head_dim = base.block_tables, key_cache.shape[3]
        return (
            self._prefill_kernel_built
            and not (self.bf16_prefill_in_torch and query.dtype == torch.bfloat16)
            and query.dtype in _DTYPE_CODES
            and query.dtype != FP8_KV_DTYPE
            and key_cache.dtype in _DTYPE_CODES
            and head_dim % 16 == 0
            and head_dim <= PREFILL_KERNEL_MAX_HEAD_DIM
            and query.shape[1] // key_cache.shape[2] <= PREFILL_KERNEL_MAX_GROUP
            and _rows_of_heads(query)
            and _rows_of_heads(out)
            and out.dtype == query.dtype
            and out.shape == query.shape
            and key_cache.is_contiguous()
            and value_cache.is_contiguous()
            and tables.dtype == torch.int64
            and tables.dim() == 2
            and tables.stride(1) == 1
        )

    def _attend_chunks(
        self,
        query: torch.Tensor,
        cache: KVCache,
        base: TorchAttentionMetadata,
        scale: float,
        out: torch.Tensor,
        seqs: list[int],
    ) -> None:
        """Chunks ``seqs``, each causally over its whole context, through the C kernel: the
        pools read in place through the block tables, no gathered copy."""
        key_cache, value_cache = cache
        tables = base.block_tables
        _, block_size, num_kv_heads, head_dim = key_cache.shape
        starts = base.query_start_loc
        chunks = torch.tensor(
            [[i, starts[i], starts[i + 1] - starts[i], base.seq_lens[i]] for i in seqs],
            dtype=torch.int64,
        )
        k_scale, v_scale = kv_scales(cache)
        status = self._prefill_kernel(
            query.data_ptr(),
            query.stride(0),
            out.data_ptr(),
            out.stride(0),
            _DTYPE_CODES[query.dtype],
            query.shape[0],
            key_cache.data_ptr(),
            value_cache.data_ptr(),
            _DTYPE_CODES[key_cache.dtype],
            tables.data_ptr(),
            tables.shape[0],
            tables.stride(0),
            chunks.data_ptr(),
            len(seqs),
            query.shape[1],
            num_kv_heads,
            head_dim,
            block_size,
            scale,
            k_scale,
            v_scale,
            torch.get_num_threads(),
        )
        if status != 0:
            raise RuntimeError(f"CPU prefill-attention kernel failed with status {status}")


def _rows_of_heads(x: torch.Tensor) -> bool:
    """(T, H, D) whose heads lie contiguously within each token's row."""
    return x.dim() == 3 and x.stride(2) == 1 and x.stride(1) == x.shape[2]
