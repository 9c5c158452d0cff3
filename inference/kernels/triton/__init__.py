"""Triton kernels for the GPU path, behind `AttentionBackend`.

Importing this package imports nothing heavy; `backend.TritonAttentionBackend` pulls in
triton. Kernels read and write the paged pools of `inference.kernels.attention` in place
(no gather copies) and must match `TorchAttentionBackend`, the reference. On a CPU they
run only under ``TRITON_INTERPRET=1`` (set before triton is imported), which is how the
tests exercise them.
"""
