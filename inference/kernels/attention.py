"""Paged attention over a block-table KV cache: the torch reference and CPU path.

The cache of one layer is a pair of pools, each (num_blocks, block_size, num_kv_heads,
head_dim); a sequence's token at position p lives in block block_table[p // block_size]
at offset p % block_size. A step's batch is flat: T new tokens from B sequences, each
sequence's new tokens being the last query_len positions of its context (causal).

A step reaches attention as a `PagedLayout` (host-side arrays: where the new tokens go
and what each sequence attends to); each backend turns it into its own metadata
(`build_metadata`), built once per step and read by every layer, holding only what that
backend reads. The model itself reads only ``meta.slot_mapping`` (for the KV write).

Sequences with one new token (decodes) are attended together: one gather through the
block tables and one masked SDPA. Longer chunks (prefills) are attended one sequence at a
time, with SDPA's own GQA and, when nothing precedes the chunk, its causal kernel. A
Triton kernel must match `TorchAttentionBackend` and can replace it behind
`AttentionBackend`. FP8 pools follow the convention in `kv_cache.py`: the key scale folds
into the softmax scale and the value scale into the output, so reads cost one upcast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
import torch.nn.functional as F

from inference.kernels.kv_cache import KVCache, kv_scales, to_cache_dtype


@dataclass(frozen=True, slots=True)
class PagedLayout:
    """Where a step's new tokens go and what each sequence attends to, on the host.

    Checked when made: every sequence has new tokens, and its context fits its table.
    """

    slots: np.ndarray  # (T,) int64: block_id * block_size + offset per new token
    query_start_loc: list[int]  # (B + 1,) cumulative new-token counts
    seq_lens: list[int]  # (B,) context length after this step
    block_tables: np.ndarray  # (B, max_blocks) int64, padded with 0
    block_size: int

    def __post_init__(self) -> None:
        starts, lens, tables = self.query_start_loc, self.seq_lens, self.block_tables
        num_seqs = len(lens)
        if len(starts) != num_seqs + 1 or starts[0] != 0:
            raise ValueError("query_start_loc must have len(seq_lens) + 1 entries from 0")
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        if tables.ndim != 2 or tables.shape[0] != num_seqs:
            raise ValueError(f"block_tables must be ({num_seqs}, max_blocks)")
        if self.slots.shape != (starts[-1],):
            raise ValueError("slots must have one slot per new token")
        capacity = tables.shape[1] * self.block_size
        for i in range(num_seqs):
            qlen, ctx = starts[i + 1] - starts[i], lens[i]
            if qlen <= 0 or ctx < qlen or ctx > capacity:
                raise ValueError(
                    f"sequence {i}: query_len {qlen} and seq_len {ctx} do not fit "
                    f"{tables.shape[1]} blocks of {self.block_size}"
                )

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return self.query_start_loc[-1]

    def query_len(self, seq: int) -> int:
        return self.query_start_loc[seq + 1] - self.query_start_loc[seq]

    @property
    def decode_seqs(self) -> list[int]:
        """The sequences with one new token."""
        return [i for i in range(self.num_seqs) if self.query_len(i) == 1]

    @property
    def prefill_seqs(self) -> list[int]:
        """The sequences with a chunk of several new tokens."""
        return [i for i in range(self.num_seqs) if self.query_len(i) > 1]

    @property
    def is_pure_decode(self) -> bool:
        return self.num_tokens == self.num_seqs


def paged_layout(
    slots: Any, query_start_loc: list[int], seq_lens: list[int], block_tables: Any, block_size: int
) -> PagedLayout:
    """A layout from lists, numpy arrays or CPU tensors (for tests and benchmarks)."""
    return PagedLayout(
        np.asarray(slots, dtype=np.int64).reshape(-1),
        [int(x) for x in query_start_loc],
        [int(x) for x in seq_lens],
        np.asarray(block_tables, dtype=np.int64),
        block_size,
    )


class AttentionMetadata(Protocol):
    """What the model reads of any backend's metadata: the new tokens' cache slots."""

    @property
    def slot_mapping(self) -> torch.Tensor: ...


M = TypeVar("M", bound=AttentionMetadata)


class AttentionBackend(Protocol[M]):
    def build_metadata(self, layout: PagedLayout, device: torch.device) -> M:
        """This backend's metadata for one step (one call per step, read by every layer)."""
        ...

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
    ) -> None: ...

    def forward(
        self, query: torch.Tensor, cache: KVCache, meta: M, scale: float
    ) -> torch.Tensor: ...


@dataclass
class TorchAttentionMetadata:
    """The torch path's view of a step: device tensors for the batched decode gather."""

    slot_mapping: torch.Tensor  # (T,) int64
    query_start_loc: list[int]  # (B + 1,)
    seq_lens: list[int]  # (B,)
    block_tables: torch.Tensor  # (B, max_blocks) int64, padded with 0
    block_size: int
    decode_seqs: list[int] = field(default_factory=list)
    decode_rows: torch.Tensor | None = None  # (Bd,) their token rows in the flat batch
    decode_lens: torch.Tensor | None = None  # (Bd,) int64 their context lengths
    decode_blocks: torch.Tensor | None = None  # (Bd, Nmax) block ids of their contexts
    prefill_seqs: list[int] = field(default_factory=list)
    _decode_mask: torch.Tensor | None = None

    def decode_mask(self) -> torch.Tensor | None:
        """(Bd, 1, 1, Nmax * block_size) bool: the real slots of the gathered blocks. Made on
        first use (the C decode kernel never reads it) and shared by every layer."""
        if self._decode_mask is None and self.decode_blocks is not None:
            lens = self.decode_lens
            assert lens is not None
            width = self.decode_blocks.shape[1] * self.block_size
            positions = torch.arange(width, device=lens.device)
            self._decode_mask = (positions[None, :] < lens[:, None])[:, None, None, :]
        return self._decode_mask


def build_torch_metadata(layout: PagedLayout, device: torch.device) -> TorchAttentionMetadata:
    tables = torch.from_numpy(layout.block_tables).to(device)
    meta = TorchAttentionMetadata(
        slot_mapping=torch.from_numpy(layout.slots).to(device),
        query_start_loc=list(layout.query_start_loc),
        seq_lens=list(layout.seq_lens),
        block_tables=tables,
        block_size=layout.block_size,
        decode_seqs=layout.decode_seqs,
        prefill_seqs=layout.prefill_seqs,
    )
    if meta.decode_seqs:
        host_lens = [layout.seq_lens[i] for i in meta.decode_seqs]
        meta.decode_lens = torch.tensor(host_lens, dtype=torch.int64, device=device)
        # Whole blocks are gathered (contiguous copies, far cheaper than per-slot
        # indexing); the mask hides the slots past each context's end.
        num_blocks = -(-max(host_lens) // layout.block_size)
        index = torch.tensor(meta.decode_seqs, dtype=torch.int64, device=device)
        meta.decode_blocks = tables.index_select(0, index)[:, :num_blocks]
        meta.decode_rows = torch.tensor(
            [layout.query_start_loc[i] for i in meta.decode_seqs],
            dtype=torch.int64,
            device=device,
        )
    return meta


class TorchAttentionBackend:
    def build_metadata(self, layout: PagedLayout, device: torch.device) -> TorchAttentionMetadata:
        return build_torch_metadata(layout, device)

    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
    ) -> None:
        """Store key/value (T, Hkv, D) at their flat cache slots."""
        key_cache, value_cache = cache
        k_scale, v_scale = kv_scales(cache)
        _store(key_cache, slot_mapping, to_cache_dtype(key, key_cache.dtype, k_scale))
        _store(value_cache, slot_mapping, to_cache_dtype(value, value_cache.dtype, v_scale))

    def forward(
        self, query: torch.Tensor, cache: KVCache, meta: TorchAttentionMetadata, scale: float
    ) -> torch.Tensor:
        """query (T, Hq, D) -> attention output (T, Hq, D) over each sequence's context."""
        num_heads, num_kv_heads = query.shape[1], cache[0].shape[2]
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} query heads do not group over {num_kv_heads}")
        out = torch.empty_like(query)
        if meta.decode_seqs:
            self.decode(query, cache, meta, scale, out)
        self.prefill(query, cache, meta, scale, out, meta.prefill_seqs)
        return out

    def decode(
        self,
        query: torch.Tensor,
        cache: KVCache,
        meta: TorchAttentionMetadata,
        scale: float,
        out: torch.Tensor,
    ) -> None:
        """Attend the one-token sequences (``meta.decode_seqs``) into their rows of ``out``."""
        key_cache, value_cache = cache
        k_scale, v_scale = kv_scales(cache)
        num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
        num_heads = query.shape[1]
        group = num_heads // num_kv_heads
        rows, blocks, mask = meta.decode_rows, meta.decode_blocks, meta.decode_mask()
        if rows is None or blocks is None or mask is None:
            return
        # Query heads of one KV group become that group's "query positions": GQA without
        # repeating keys. q (Bd, Hkv, G, D); k, v (Bd, Hkv, Lmax, D).
        q = query.index_select(0, rows).view(-1, num_kv_heads, group, head_dim)
        k = _gather_blocks(key_cache, blocks, query.dtype).transpose(1, 2)
        v = _gather_blocks(value_cache, blocks, query.dtype).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale * k_scale)
        if v_scale != 1.0:
            o = o * v_scale
        out.index_copy_(0, rows, o.reshape(-1, num_heads, head_dim))

    def prefill(
        self,
        query: torch.Tensor,
        cache: KVCache,
        meta: TorchAttentionMetadata,
        scale: float,
        out: torch.Tensor,
        seqs: list[int],
    ) -> None:
        """Attend the chunks ``seqs`` (of ``meta.prefill_seqs``), each causally over its whole
        context, into their rows of ``out``."""
        key_cache, value_cache = cache
        k_scale, v_scale = kv_scales(cache)
        scale = scale * k_scale  # q . (k_scale k) = k_scale (q . k)
        gqa = query.shape[1] > key_cache.shape[2]
        for i in seqs:
            start, end = meta.query_start_loc[i], meta.query_start_loc[i + 1]
            qlen, ctx = end - start, meta.seq_lens[i]
            seq_blocks = meta.block_tables[i, : -(-ctx // meta.block_size)]
            # (ctx, Hkv, D) -> (1, Hkv, ctx, D)
            k = _gather_blocks(key_cache, seq_blocks, query.dtype)[:ctx].transpose(0, 1)[None]
            v = _gather_blocks(value_cache, seq_blocks, query.dtype)[:ctx].transpose(0, 1)[None]
            q = query[start:end].transpose(0, 1)[None]  # (1, Hq, qlen, D)
            if qlen == ctx:  # nothing cached before this chunk: plain causal attention
                o = F.scaled_dot_product_attention(
                    q, k, v, is_causal=True, scale=scale, enable_gqa=gqa
                )
            else:  # the chunk's queries are the last qlen positions of the context
                query_pos = torch.arange(ctx - qlen, ctx, device=query.device)
                causal = query_pos[:, None] >= torch.arange(ctx, device=query.device)[None, :]
                o = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=causal, scale=scale, enable_gqa=gqa
                )
            if v_scale != 1.0:
                o = o * v_scale
            out[start:end] = o[0].transpose(0, 1)


def _store(pool: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
    """values (T, Hkv, D), already in the pool's dtype, into flat slots of the pool."""
    flat = pool.view(-1, *pool.shape[2:])
    if pool.element_size() == 1:  # index_copy_ has no FP8 kernel on CPU: copy the bytes
        flat, values = flat.view(torch.uint8), values.view(torch.uint8)
    flat.index_copy_(0, slots, values)


def _gather_blocks(cache: torch.Tensor, blocks: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """blocks (..., N) -> (..., N * block_size, Hkv, D) in `dtype`.

    index_select over whole blocks is several times faster on CPU than advanced indexing.
    """
    gathered = cache.index_select(0, blocks.flatten())
    return gathered.view(*blocks.shape[:-1], -1, *cache.shape[2:]).to(dtype)


def write_kv(
    key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
) -> None:
    TorchAttentionBackend().write_kv(key, value, cache, slot_mapping)


def paged_attention(
    query: torch.Tensor, cache: KVCache, layout: PagedLayout, scale: float
) -> torch.Tensor:
    backend = TorchAttentionBackend()
    return backend.forward(query, cache, backend.build_metadata(layout, query.device), scale)
