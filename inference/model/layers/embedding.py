"""Token embedding without random initialisation (weights always come from a checkpoint)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class VocabEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden: int, dtype: torch.dtype, device: torch.device):
        super().__init__()
        self.weight = nn.Parameter(
            torch.empty(vocab_size, hidden, dtype=dtype, device=device), requires_grad=False
        )

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # (T,) -> (T, hidden)
        return F.embedding(input_ids, self.weight)

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:  # (N, hidden) -> (N, vocab)
        """Logits of a tied output projection: ``hidden @ weight.T``."""
        return F.linear(hidden, self.weight)
