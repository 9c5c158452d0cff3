"""What torch's own CPU kernels can use on this processor, where our choices follow them."""

from __future__ import annotations

import torch


def torch_has_amx() -> bool:
    """Whether torch's CPU matmuls (oneDNN's brgemm) run bfloat16 on AMX tiles here."""
    return bool(getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
