"""Attention kernels: the torch reference, the C kernels on a CPU, Triton on a GPU."""

from inference.kernels.attention import (
    AttentionBackend,
    AttentionMetadata,
    KVCache,
    PagedLayout,
    TorchAttentionBackend,
    TorchAttentionMetadata,
    paged_attention,
    paged_layout,
    write_kv,
)

__all__ = [
    "AttentionBackend",
    "AttentionMetadata",
    "KVCache",
    "PagedLayout",
    "TorchAttentionBackend",
    "TorchAttentionMetadata",
    "paged_attention",
    "paged_layout",
    "write_kv",
]
