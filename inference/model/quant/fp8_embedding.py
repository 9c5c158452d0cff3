"""An FP8 token embedding that can also serve as the tied output projection.

The table (vocab, hidden) is e4m3 with a float32 scale per row and group of `group_size`
hidden columns: the same numbers are a row scale for the lookup and, read as a weight,
per-output-channel (and group) scales for the logits, so a tied model keeps one table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from inference.model.layers.embedding import VocabEmbedding
from inference.model.quant.fp8_math import (
    FP8_DTYPE,
    GroupedFp8Matmul,
    quantize_rows_into,
    quantize_weight_fp8,
)
from inference.model.quant.group_lazy import AnyGroupQuantized

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels


class Fp8Embedding(nn.Module):
    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        *,
        group_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__()
        if group_size <= 0:
            raise ValueError(f"group_size must be positive, got {group_size}")
        self.group_size = group_size
        self.dtype = dtype
        self.weight = nn.Parameter(
            torch.empty(vocab_size, hidden, dtype=FP8_DTYPE, device=device), requires_grad=False
        )
        groups = -(-hidden // group_size)
        self.weight_scale = nn.Parameter(
            torch.ones(vocab_size, groups, dtype=torch.float32, device=device),
            requires_grad=False,
        )
        self._matmul = GroupedFp8Matmul()

    @classmethod
    def from_embedding(cls, embedding: VocabEmbedding, *, group_size: int) -> Fp8Embedding:
        weight = embedding.weight.data
        layer = cls(*weight.shape, group_size=group_size, dtype=weight.dtype, device=weight.device)
        q, scale = quantize_weight_fp8(weight, group_size)
        layer.weight.data.copy_(q)
        layer.weight_scale.data.copy_(scale)
        return layer

    # A checkpoint supplies the float table; its scales are computed as it loads.
    checkpoint_parameters = ("weight",)

    def load_shard(
        self, param_name: str, shard: int, tensor: torch.Tensor | AnyGroupQuantized, name: str
    ) -> None:
        """Quantize a checkpoint's float table into this one as it loads."""
        if param_name != "weight" or shard != 0:
            raise ValueError(f"unexpected tensor {name}: an FP8 embedding takes its table only")
        quantize_rows_into(tensor, self.dtype, self.weight.data, self.weight_scale.data,
                           self.group_size)  # fmt: skip

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # (T,) -> (T, hidden)
        # Gathered as bytes: index_select has no FP8 kernel on every device.
        rows = self.weight.view(torch.uint8).index_select(0, input_ids).view(FP8_DTYPE)
        scale = self.weight_scale.index_select(0, input_ids)
        return self._matmul.dequantize(rows, scale, self.dtype, self.group_size)

    def use_paths(self, *, triton: bool) -> None:
        """The device profile's choice for the tied output projection (see `Fp8Linear`)."""
        self._matmul.use_triton(triton)

    @property
    def kernels(self) -> CpuLayerKernels | None:
        """The CPU's fused kernels, which dequantize the table where set."""
        return self._matmul.kernels

    @kernels.setter
    def kernels(self, kernels: CpuLayerKernels | None) -> None:
        self._matmul.kernels = kernels

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:  # (N, hidden) -> (N, vocab)
        """Logits of a tied output projection: ``hidden @ table.T``."""
        return self._matmul(hidden, self.weight, self.weight_scale, self.group_size)

    def extra_repr(self) -> str:
        vocab, hidden = self.weight.shape
        return f"{vocab}, {hidden}, group_size={self.group_size}"
