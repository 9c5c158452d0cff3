"""Rotary position embeddings (half-split layout), with llama3 and linear frequency scaling."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels


def rope_inverse_frequencies(
    head_dim: int, theta: float, scaling: dict[str, Any] | None
) -> torch.Tensor:
    """(head_dim // 2,) float32 inverse frequencies."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    if scaling is None:
        return inv_freq
    rope_type = scaling["rope_type"]
    if rope_type == "freq_factors":
        # llama.cpp's form of Llama 3.1 scaling: one divisor per frequency (rope_freqs).
        factors = torch.tensor(scaling["factors"], dtype=torch.float32)
        if factors.shape != inv_freq.shape or not bool((factors > 0).all()):
            raise ValueError(
                f"rope frequency factors must be {inv_freq.shape[0]} positive numbers, "
                f"got shape {tuple(factors.shape)}"
            )
        return inv_freq / factors
    factor = float(scaling["factor"])
    if rope_type == "linear":
        return inv_freq / factor
    if rope_type == "llama3":
        return _llama3_scale(inv_freq, factor, scaling)
    raise ValueError(f"unsupported rope_type {rope_type!r}")


def _llama3_scale(inv_freq: torch.Tensor, factor: float, scaling: dict[str, Any]) -> torch.Tensor:
    # Llama 3.1 keeps high frequencies, divides low frequencies by `factor`, and blends
    # linearly in between, measured by wavelength against the original context length.
    low_factor = float(scaling["low_freq_factor"])
    high_factor = float(scaling["high_freq_factor"])
    original = float(scaling["original_max_position_embeddings"])
    wavelength = 2 * math.pi / inv_freq
    smooth = (original / wavelength - low_factor) / (high_factor - low_factor)
    blended = (1 - smooth) * inv_freq / factor + smooth * inv_freq
    scaled = torch.where(wavelength > original / low_factor, inv_freq / factor, blended)
    return torch.where(wavelength < original / high_factor, inv_freq, scaled)


class RotaryEmbedding(nn.Module):
    """Computes cos/sin once per forward pass; every layer then rotates with them."""

    def __init__(
        self, head_dim: int, theta: float, scaling: dict[str, Any] | None, device: torch.device
    ) -> None:
        super().__init__()
        inv_freq = rope_inverse_frequencies(head_dim, theta, scaling).to(device)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (T,) -> cos, sin (T, 1, D/2) in ``dtype``.

        Angles are computed in float32 and cast once, as the reference models do.
        """
        inv_freq: torch.Tensor = self.inv_freq  # type: ignore[assignment]
        angles = positions.float()[:, None] * inv_freq[None, :]  # (T, D/2)
        return angles.cos().to(dtype)[:, None, :], angles.sin().to(dtype)[:, None, :]


def apply_rotary(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    kernels: CpuLayerKernels | None = None,
) -> torch.Tensor:
    """x (T, H, D) in the half-split layout, rotated by cos/sin (T, 1, D/2).

    ``kernels``: the fused CPU kernel, used where it takes the tensors.
    """
    if (
        kernels is not None
        and x.stride(1) == x.shape[2]
        and cos.is_contiguous()
        and sin.is_contiguous()
        and kernels.accepts(x, cos, sin)
    ):
        return kernels.rotary(x, cos, sin)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
