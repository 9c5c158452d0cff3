"""The Llama family (Llama 2/3, Mistral, Qwen2, Qwen3, SmolLM2) over a paged KV cache.

Shapes: T is the number of new tokens in the flat batch (prefill chunks and decodes mixed).
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from inference.kernels.attention import (
    AttentionBackend,
    AttentionMetadata,
    KVCache,
    TorchAttentionBackend,
)
from inference.model.arch import ArchConfig
from inference.model.layers.activation import silu_and_mul
from inference.model.layers.embedding import VocabEmbedding
from inference.model.layers.linear import (
    FusedLinear,
    Linear,
    can_prepack_for_cpu,
    linear_packed,
    pack_weight_for_cpu,
)
from inference.model.layers.norm import RMSNorm
from inference.model.layers.rotary import RotaryEmbedding, apply_rotary
from inference.model.quant.fp8 import Fp8Linear
from inference.model.quant.fp8_embedding import Fp8Embedding
from inference.model.quant.group_lazy import AnyGroupQuantized
from inference.model.quant.group_linear import GroupQuantLinear, GroupQuantWeights
from inference.model.weights import load_named_weights

PREPACK_THREADS = 4  # at most, for prepacking the linear weights at start-up

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels
    from inference.kernels.profile import DeviceProfile

Rope = tuple[torch.Tensor, torch.Tensor]  # cos, sin: (T, 1, head_dim / 2)


class LlamaAttention(nn.Module):
    def __init__(
        self,
        config: ArchConfig,
        backend: AttentionBackend[Any],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.num_heads = config.num_heads
        self.num_kv_heads = config.num_kv_heads
        self.head_dim = config.head_dim
        self.scale = config.head_dim**-0.5
        self.backend = backend
        q, kv = config.q_size, config.kv_size
        self.qkv_proj = FusedLinear(
            config.hidden_size, [q, kv, kv], bias=config.attention_bias, dtype=dtype, device=device
        )
        # Llama and Qwen3 put attention_bias on o_proj too; Qwen2 has q/k/v bias only.
        o_bias = config.attention_bias and config.architecture != "Qwen2ForCausalLM"
        self.o_proj = Linear(q, config.hidden_size, bias=o_bias, dtype=dtype, device=device)
        self.kernels: CpuLayerKernels | None = None  # fused CPU rotary, where set
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps, dtype, device)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps, dtype, device)

    def forward(
        self,
        hidden: torch.Tensor,  # (T, hidden)
        rope: Rope,
        kv_cache: KVCache,
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        num_tokens = hidden.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        qkv = self.qkv_proj(hidden)
        v = qkv[:, q_size + kv_size :].view(num_tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            q, k, _ = qkv.split([q_size, kv_size, kv_size], dim=-1)
            q = self.q_norm(q.view(num_tokens, self.num_heads, self.head_dim))
            k = self.k_norm(k.view(num_tokens, self.num_kv_heads, self.head_dim))
            q, k = apply_rotary(q, *rope, self.kernels), apply_rotary(k, *rope, self.kernels)
        else:
            # q and k sit side by side in qkv: rotate all their heads in one go.
            qk = qkv[:, : q_size + kv_size].view(num_tokens, -1, self.head_dim)
            rotated = apply_rotary(qk, *rope, self.kernels)
            q, k = rotated.split([self.num_heads, self.num_kv_heads], dim=1)
        self.backend.write_kv(k, v, kv_cache, meta.slot_mapping)
        out = self.backend.forward(q, kv_cache, meta, self.scale)  # (T, Hq, D)
        return self.o_proj(out.view(num_tokens, q_size))


class LlamaMLP(nn.Module):
    def __init__(self, config: ArchConfig, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        inter = config.intermediate_size
        self.gate_up_proj = FusedLinear(
            config.hidden_size, [inter, inter], bias=False, dtype=dtype, device=device
        )
        self.down_proj = Linear(inter, config.hidden_size, bias=False, dtype=dtype, device=device)
        self.kernels: CpuLayerKernels | None = None  # fused CPU SiLU-and-multiply, where set

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(silu_and_mul(self.gate_up_proj(x), self.kernels))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        config: ArchConfig,
        backend: AttentionBackend[Any],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps, dtype, device)
        self.self_attn = LlamaAttention(config, backend, dtype, device)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, dtype, device)
        self.mlp = LlamaMLP(config, dtype, device)

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        rope: Rope,
        kv_cache: KVCache,
        meta: AttentionMetadata,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(this layer's output, the residual stream before it) for the next layer to add;
        residual None for the first layer, whose input is the stream."""
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(hidden, rope, kv_cache, meta)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class LlamaModel(nn.Module):
    def __init__(
        self,
        config: ArchConfig,
        backend: AttentionBackend[Any],
        dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        super().__init__()
        self.embed_tokens = VocabEmbedding(config.vocab_size, config.hidden_size, dtype, device)
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, backend, dtype, device) for _ in range(config.num_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)
        self.rotary = RotaryEmbedding(
            config.head_dim, config.rope_theta, config.rope_scaling, device
        )


class LlamaForCausalLM(nn.Module):
    def __init__(
        self,
        config: ArchConfig,
        dtype: torch.dtype,
        device: torch.device | str = "cpu",
        *,
        attention_backend: AttentionBackend[Any] | None = None,
    ) -> None:
        super().__init__()
        device = torch.device(device)
        self.config = config
        self.dtype = dtype
        # Counts the changes of path below (kernels, attention backend): a recorded decode
        # graph (inference/engine/cpu_graphs.py) is of the paths it saw, and is dropped.
        self.revision = 0
        backend = attention_backend or TorchAttentionBackend()
        self.model = LlamaModel(config, backend, dtype, device)
        self.lm_head: Linear | None = None
        # A packed copy of the tied embedding, for the output projection only (the lookup
        # keeps reading the plain table); set by `prepack_for_cpu`.
        self.packed_tied_head: torch.Tensor | None = None
        if not config.tie_word_embeddings:
            self.lm_head = Linear(
                config.hidden_size, config.vocab_size, bias=False, dtype=dtype, device=device
            )

    def forward(
        self,
        input_ids: torch.Tensor,  # (T,)
        positions: torch.Tensor,  # (T,)
        kv_caches: list[KVCache],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """Final-normed hidden states (T, hidden); new keys/values land in kv_caches."""
        if len(kv_caches) != len(self.model.layers):
            raise ValueError(f"need {len(self.model.layers)} KV caches, got {len(kv_caches)}")
        hidden = self.model.embed_tokens(input_ids)
        rope = self.model.rotary.cos_sin(positions, hidden.dtype)
        return self.forward_layers(hidden, rope, kv_caches, meta)

    def forward_layers(
        self,
        hidden: torch.Tensor,  # (T, hidden): the embedded tokens
        rope: Rope,
        kv_caches: list[KVCache],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """`forward` after the embedding and the rotary angles: what a CPU decode graph
        records (inference/engine/cpu_graphs.py), its inputs then being buffers."""
        residual: torch.Tensor | None = None
        for layer, kv_cache in zip(self.model.layers, kv_caches, strict=True):
            hidden, residual = layer(hidden, residual, rope, kv_cache, meta)
        if residual is not None:
            hidden, _ = self.model.norm(hidden, residual)
            return hidden
        normed: torch.Tensor = self.model.norm(hidden)  # a model without layers
        return normed

    def set_layer_kernels(self, kernels: CpuLayerKernels | None) -> None:
        """Let the norms, rotary, SiLU-and-multiply, FP8 dequantizing and group-quantized
        matmuls run the fused CPU kernels (None: off)."""
        self.revision += 1
        users = (RMSNorm, LlamaAttention, LlamaMLP, Fp8Linear, Fp8Embedding, GroupQuantWeights)
        for module in self.modules():
            if isinstance(module, users):
                module.kernels = kernels

    def rows_in_place(self) -> int | None:
        """The most rows a pass multiplies without a float copy of a weight (a group-quantized
        layer past its kernel's rows dequantizes per call); None: no such limit."""
        limits = [
            limit
            for module in self.modules()
            if isinstance(module, GroupQuantLinear) and (limit := module.rows_in_place) is not None
        ]
        return min(limits, default=None)

    def set_attention_backend(self, backend: AttentionBackend[Any]) -> None:
        """Let every layer attend through ``backend`` (the engine picks it per device)."""
        self.revision += 1
        for module in self.modules():
            if isinstance(module, LlamaAttention):
                module.backend = backend

    def use_device_profile(self, profile: DeviceProfile) -> None:
        """Swap the profile's choices into every layer, once, before the first step."""
        self.set_attention_backend(profile.attention)
        self.set_layer_kernels(profile.layer_kernels)
        for module in self.modules():
            if isinstance(module, Fp8Linear):
                module.use_paths(scaled_mm=profile.fp8_scaled_mm, triton=profile.fp8_triton)
            elif isinstance(module, Fp8Embedding):
                module.use_paths(triton=profile.fp8_triton)
            elif isinstance(module, GroupQuantWeights):
                module.use_triton(profile.group_quant_triton)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(N, hidden) -> (N, vocab) float32."""
        if self.lm_head is not None:
            return self.lm_head(hidden).float()
        if self.packed_tied_head is not None:
            return linear_packed(hidden, self.packed_tied_head, None).float()
        logits: torch.Tensor = self.model.embed_tokens.unembed(hidden)
        return logits.float()

    def prepack_for_cpu(self, batch_hint: int) -> int:
        """Prepack every bfloat16 linear weight for oneDNN (see layers/linear.py).

        Returns how many weights were packed: none off the CPU, for other dtypes (FP8
        linears are not FusedLinear and stay as they are) or without bf16 kernels.
        """
        layers = [m for m in self.modules() if isinstance(m, FusedLinear) and not m.packed]
        layers = [m for m in layers if can_prepack_for_cpu(m.weight)]
        # Over a few threads: each reorder is a small, mostly serial oneDNN call, and side
        # by side they took the demo model's prepack from 0.6 s to 0.15 s at start-up.
        threads = max(1, min(PREPACK_THREADS, torch.get_num_threads()))
        with ThreadPoolExecutor(threads, thread_name_prefix="prepack") as pool:
            list(pool.map(lambda layer: layer.prepack_for_cpu(batch_hint), layers))
        table = self.model.embed_tokens.weight  # an FP8 table is not bf16: left alone
        if self.lm_head is None and self.packed_tied_head is None and can_prepack_for_cpu(table):
            self.packed_tied_head = pack_weight_for_cpu(table, batch_hint)
            return len(layers) + 1
        return len(layers)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor | AnyGroupQuantized]]) -> None:
        """Load Hugging Face-named tensors; raise ValueError on missing/unexpected/bad shape."""
        load_named_weights(self, weights, tied=self.config.tie_word_embeddings)
