"""The CPU attention backend: decodes through the C kernel, prefill chunks through torch.

Decode steps are where the torch path spends its time on a CPU: it gathers every
sequence's whole context out of the pool (a copy of all of K and V each layer) before one
masked SDPA. The kernel in paged_decode.c reads the pool in place through the block
tables. Prefill chunks are long enough for SDPA's own kernels, so they stay on the torch
path, which is also the reference the kernel is tested against.

Cascade (cascade.py): when the decodes share leading blocks (every chat that starts with
the same system prompt hits the same cached blocks), those are attended once for the whole
batch, and the kernel attends each sequence's own part and folds the two together. So are
prefill chunks that all follow the same cached blocks: the shared keys are read once per
layer instead of once per sequence.
"""

from __future__ import annotations

import ctypes

import torch

from inference.kernels.attention import AttentionMetadata, TorchAttentionBackend
from inference.kernels.cpu.cascade import fold, own_chunk_attention, shared_prefix_attention
from inference.kernels.kv_cache import FP8_KV_DTYPE, KVCache, kv_scales

_DTYPE_CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, FP8_KV_DTYPE: 3}
# Shorter shared prefixes are not worth a separate pass.
CASCADE_MIN_TOKENS = 64


class CpuAttentionBackend(TorchAttentionBackend):
    def __init__(self, library: ctypes.CDLL) -> None:
        self._kernel = library.paged_decode_attention

    def decode(
        self,
        query: torch.Tensor,
        cache: KVCache,
        meta: AttentionMetadata,
        scale: float,
        out: torch.Tensor,
    ) -> None:
        key_cache, value_cache = cache
        rows, blocks, lens = meta.decode_rows, meta.decode_blocks, meta.decode_lens
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
            super().decode(query, cache, meta, scale, out)
            return
        k_scale, v_scale = kv_scales(cache)
        _, block_size, num_kv_heads, head_dim = key_cache.shape
        skip = meta.decode_shared_blocks * block_size
        prior: torch.Tensor | None = None
        prior_lse: torch.Tensor | None = None
        if skip >= CASCADE_MIN_TOKENS:
            prior, prior_lse = shared_prefix_attention(
                query.index_select(0, rows), cache, blocks[0, : meta.decode_shared_blocks], scale
            )
        else:
            skip = 0
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
            torch.get_num_threads(),
        )
        if status != 0:
            raise RuntimeError(f"CPU paged-attention kernel failed with status {status}")

    def prefill(
        self,
        query: torch.Tensor,
        cache: KVCache,
        meta: AttentionMetadata,
        scale: float,
        out: torch.Tensor,
        seqs: list[int],
    ) -> None:
        """Chunks that are all of their context past the shared blocks go through the
        cascade; any other chunk through the torch path."""
        block_size = cache[0].shape[1]
        shared = meta.prefill_shared_blocks
        skip = shared * block_size
        starts = meta.query_start_loc
        cascade = [i for i in seqs if meta.seq_lens[i] - (starts[i + 1] - starts[i]) == skip]
        if skip < CASCADE_MIN_TOKENS or len(cascade) < 2:
            super().prefill(query, cache, meta, scale, out, seqs)
            return
        rows = torch.cat([torch.arange(starts[i], starts[i + 1]) for i in cascade])
        queries = query.index_select(0, rows)
        prior, prior_lse = shared_prefix_attention(
            queries, cache, meta.block_tables[cascade[0], :shared], scale
        )
        at = 0
        for i in cascade:
            length = starts[i + 1] - starts[i]
            own_blocks = meta.block_tables[i, shared : -(-meta.seq_lens[i] // block_size)]
            own, own_lse = own_chunk_attention(queries[at : at + length], cache, own_blocks, scale)
            mine = slice(at, at + length)
            out[starts[i] : starts[i + 1]] = fold(prior[mine], prior_lse[mine], own, own_lse)
            at += length
        rest = [i for i in seqs if i not in cascade]
        if rest:
            super().prefill(query, cache, meta, scale, out, rest)


def _rows_of_heads(x: torch.Tensor) -> bool:
    """(T, H, D) whose heads lie contiguously within each token's row."""
    return x.dim() == 3 and x.stride(2) == 1 and x.stride(1) == x.shape[2]
