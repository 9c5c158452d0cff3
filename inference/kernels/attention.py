"""Paged attention over a block-table KV cache: the torch reference and CPU path.

The cache of one layer is a pair of pools, each (num_blocks, block_size, num_kv_heads,
head_dim); a sequence's token at position p lives in block block_table[p // block_size]
at offset p % block_size. A step's batch is flat: T new tokens from B sequences, each
sequence's new tokens being the last query_len positions of its context (causal).

Sequences with one new token (decodes) are attended together: one gather through the
block tables and one masked SDPA. Longer chunks (prefills) are attended one sequence at a
time, with SDPA's own GQA and, when nothing precedes the chunk, its causal kernel. A
Triton kernel must match `TorchAttentionBackend` and can replace it behind
`AttentionBackend`. FP8 pools follow the convention in `kv_cache.py`: the key scale folds
into the softmax scale and the value scale into the output, so reads cost one upcast.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch
import torch.nn.functional as F

from inference.kernels.kv_cache import KVCache, kv_scales, to_cache_dtype


@dataclass
class AttentionMetadata:
    slot_mapping: torch.Tensor  # (T,) int64: block_id * block_size + offset per new token
    query_start_loc: list[int]  # (B + 1,) cumulative new-token counts
    seq_lens: list[int]  # (B,) context length after this step
    block_tables: torch.Tensor  # (B, max_blocks) int64, padded with 0
    block_size: int
    # Derived by `build`: the sequences with one new token, batched together.
    decode_seqs: list[int] = field(default_factory=list)
    decode_rows: torch.Tensor | None = None  # (Bd,) their token rows in the flat batch
    decode_lens: torch.Tensor | None = None  # (Bd,) int64 their context lengths
    # Leading blocks that every decode's table shares (a cached system prompt, say), short
    # of each decode's last token; 0 with fewer than two decodes. Cascade kernels read them
    # once for the whole batch. Found only for tables on the CPU, where the cascade
    # kernels are (elsewhere, 0: finding them would wait on the device).
    decode_shared_blocks: int = 0
    decode_blocks: torch.Tensor | None = None  # (Bd, Nmax) block ids of their contexts
    decode_mask: torch.Tensor | None = None  # (Bd, 1, 1, Nmax * block_size) bool: real slots
    prefill_seqs: list[int] = field(default_factory=list)
    # Leading blocks that every prefill chunk's table shares, all of them cached before the
    # chunks (a system prompt hit in the prefix cache); 0 with fewer than two chunks (and,
    # as above, off the CPU).
    prefill_shared_blocks: int = 0

    @classmethod
    def build(
        cls,
        slot_mapping: torch.Tensor,
        query_start_loc: list[int],
        seq_lens: list[int],
        block_tables: torch.Tensor,
        block_size: int,
    ) -> AttentionMetadata:
        num_seqs = len(seq_lens)
        if len(query_start_loc) != num_seqs + 1 or query_start_loc[0] != 0:
            raise ValueError("query_start_loc must have len(seq_lens) + 1 entries from 0")
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        if block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
            raise ValueError(f"block_tables must be ({num_seqs}, max_blocks)")
        if slot_mapping.shape != (query_start_loc[-1],):
            raise ValueError("slot_mapping must have one slot per new token")
        query_lens = [query_start_loc[i + 1] - query_start_loc[i] for i in range(num_seqs)]
        for i, (qlen, ctx) in enumerate(zip(query_lens, seq_lens, strict=True)):
            if qlen <= 0 or ctx < qlen or ctx > block_tables.shape[1] * block_size:
                raise ValueError(
                    f"sequence {i}: query_len {qlen} and seq_len {ctx} do not fit "
                    f"{block_tables.shape[1]} blocks of {block_size}"
                )
        meta = cls(slot_mapping, list(query_start_loc), list(seq_lens), block_tables, block_size)
        meta.decode_seqs = [i for i in range(num_seqs) if query_lens[i] == 1]
        meta.prefill_seqs = [i for i in range(num_seqs) if query_lens[i] > 1]
        on_cpu = block_tables.device.type == "cpu"
        if meta.decode_seqs:
            device = block_tables.device
            index = torch.tensor(meta.decode_seqs, dtype=torch.int64, device=device)
            host_lens = [seq_lens[i] for i in meta.decode_seqs]
            lens = torch.tensor(host_lens, dtype=torch.int64, device=device)
            meta.decode_lens = lens
            # Whole blocks are gathered (contiguous copies, far cheaper than per-slot
            # indexing); the mask hides the slots past each context's end.
            num_blocks = -(-max(host_lens) // block_size)
            meta.decode_blocks = block_tables.index_select(0, index)[:, :num_blocks]
            positions = torch.arange(num_blocks * block_size, device=device)
            meta.decode_mask = (positions[None, :] < lens[:, None])[:, None, None, :]
            meta.decode_rows = torch.tensor(
                [query_start_loc[i] for i in meta.decode_seqs], dtype=torch.int64, device=device
            )
            if len(meta.decode_seqs) > 1 and on_cpu:
                limit = (min(host_lens) - 1) // block_size
                meta.decode_shared_blocks = _leading_shared(meta.decode_blocks, limit)
        if len(meta.prefill_seqs) > 1 and on_cpu:
            cached = min(seq_lens[i] - query_lens[i] for i in meta.prefill_seqs) // block_size
            if cached > 0:
                index = torch.tensor(meta.prefill_seqs, device=block_tables.device)
                tables = block_tables.index_select(0, index)[:, :cached]
                meta.prefill_shared_blocks = _leading_shared(tables, cached)
        return meta


def _leading_shared(tables: torch.Tensor, limit: int) -> int:
    """How many leading columns of ``tables`` (rows of block ids) all rows agree on."""
    same = (tables == tables[:1]).all(dim=0).to(torch.int64).cumprod(dim=0)
    return min(int(same.sum()), limit)


class AttentionBackend(Protocol):
    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
    ) -> None: ...

    def forward(
        self, query: torch.Tensor, cache: KVCache, meta: AttentionMetadata, scale: float
    ) -> torch.Tensor: ...


class TorchAttentionBackend:
    def write_kv(
        self, key: torch.Tensor, value: torch.Tensor, cache: KVCache, slot_mapping: torch.Tensor
    ) -> None:
        """Store key/value (T, Hkv, D) at their flat cache slots."""
        key_cache, value_cache = cache
        k_scale, v_scale = kv_scales(cache)
        _store(key_cache, slot_mapping, to_cache_dtype(key, key_cache.dtype, k_scale))
        _store(value_cache, slot_mapping, to_cache_dtype(value, value_cache.dtype, v_scale))

    def forward(
        self, query: torch.Tensor, cache: KVCache, meta: AttentionMetadata, scale: float
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
        meta: AttentionMetadata,
        scale: float,
        out: torch.Tensor,
    ) -> None:
        """Attend the one-token sequences (``meta.decode_seqs``) into their rows of ``out``."""
        key_cache, value_cache = cache
        k_scale, v_scale = kv_scales(cache)
        num_kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
        num_heads = query.shape[1]
        group = num_heads // num_kv_heads
        rows, blocks, mask = meta.decode_rows, meta.decode_blocks, meta.decode_mask
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
        meta: AttentionMetadata,
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
    query: torch.Tensor, cache: KVCache, meta: AttentionMetadata, scale: float
) -> torch.Tensor:
    return TorchAttentionBackend().forward(query, cache, meta, scale)
