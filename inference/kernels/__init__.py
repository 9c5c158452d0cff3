"""Attention kernels: the torch reference (CPU path) now, Triton for the GPU later."""

from inference.kernels.attention import (
    AttentionBackend,
    AttentionMetadata,
    KVCache,
    TorchAttentionBackend,
    paged_attention,
    write_kv,
)

__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "KVCache",
    "TorchAttentionBackend",
    "paged_attention",
    "write_kv",
]
