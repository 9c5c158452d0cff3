"""Cascade attention on the CPU: blocks that a whole batch shares are attended once.

A cached system prompt puts the same blocks at the start of every sequence's table. The
torch path reads them once per sequence (a gathered copy, then its own attention); here
every sequence's queries attend them together, in one dense attention that also returns
each query's log-sum-exp, and each sequence's own part is attended alone and folded in:
softmax over the whole context is the two partial softmaxes weighed by their log-sum-exps.
The dense pass is the flash kernel behind `F.scaled_dot_product_attention` on the CPU,
called directly because it returns the log-sum-exp as well.
"""

from __future__ import annotations

import torch

from inference.kernels.kv_cache import KVCache, kv_scales

_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _context(pool: torch.Tensor, blocks: torch.Tensor, tokens: int, dtype: torch.dtype):
    """The first ``tokens`` of ``blocks`` in ``pool`` as (1, Hkv, tokens, D) in ``dtype``."""
    gathered = pool.index_select(0, blocks).flatten(0, 1)[:tokens]
    return gathered.to(dtype).transpose(0, 1)[None]


def shared_prefix_attention(
    query: torch.Tensor, cache: KVCache, blocks: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries (N, Hq, D) of several sequences over the keys in ``blocks``, which all of
    them share and which all precede every one of the queries (so: no mask).

    Returns the output (N, Hq, D) in the query's dtype and the log-sum-exp of each query's
    scores (N, Hq) in float32. The GQA group's query heads stand in for query positions,
    so the whole batch is one (Hkv, N * G) by (Hkv, P) attention.
    """
    key_cache, value_cache = cache
    k_scale, v_scale = kv_scales(cache)
    num_queries, num_heads, head_dim = query.shape
    num_kv_heads = key_cache.shape[2]
    group = num_heads // num_kv_heads
    tokens = blocks.shape[0] * key_cache.shape[1]
    k = _context(key_cache, blocks, tokens, query.dtype)
    v = _context(value_cache, blocks, tokens, query.dtype)
    # (N, Hkv, G, D) -> (1, Hkv, N * G, D)
    q = query.reshape(num_queries, num_kv_heads, group, head_dim).transpose(0, 1)
    q = q.reshape(1, num_kv_heads, num_queries * group, head_dim)
    out, lse = _flash(q, k, v, 0.0, False, scale=scale * k_scale)[:2]
    if v_scale != 1.0:
        out = out * v_scale
    out = out.view(num_kv_heads, num_queries, group, head_dim).transpose(0, 1)
    lse = lse.view(num_kv_heads, num_queries, group).transpose(0, 1)
    return (
        out.reshape(num_queries, num_heads, head_dim).contiguous(),
        lse.reshape(num_queries, num_heads).float().contiguous(),
    )


def own_chunk_attention(
    query: torch.Tensor, cache: KVCache, blocks: torch.Tensor, scale: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """A chunk's queries (L, Hq, D) over its own keys, the first L tokens of ``blocks``
    (the chunk is all of its context past the shared part): causal attention.

    Returns the output (L, Hq, D) in the query's dtype and the log-sum-exp (L, Hq) float32.
    """
    key_cache, value_cache = cache
    k_scale, v_scale = kv_scales(cache)
    length, num_heads, _ = query.shape
    group = num_heads // key_cache.shape[2]
    k = _context(key_cache, blocks, length, query.dtype).repeat_interleave(group, dim=1)
    v = _context(value_cache, blocks, length, query.dtype).repeat_interleave(group, dim=1)
    q = query.transpose(0, 1)[None]  # (1, Hq, L, D)
    out, lse = _flash(q, k, v, 0.0, True, scale=scale * k_scale)[:2]
    if v_scale != 1.0:
        out = out * v_scale
    return out[0].transpose(0, 1), lse[0].transpose(0, 1).float()


def fold(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> torch.Tensor:
    """Attention over the union of two disjoint sets of keys, from each set's output
    (..., H, D) and log-sum-exp (..., H); float32."""
    top = torch.maximum(lse_a, lse_b)
    weight_a = (lse_a - top).exp_()
    weight_b = (lse_b - top).exp_()
    total = weight_a + weight_b
    folded = out_a.float() * (weight_a / total)[..., None]
    return folded.add_(out_b.float() * (weight_b / total)[..., None])
