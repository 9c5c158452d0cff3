"""Group-quantized (4- and 8-bit) layers: a linear layer and a token embedding that keep
their weights as packed codes with float16 scales and offsets (`group_math.py`).

A layer never holds a float copy of its weight. On the CPU a decode step's few rows
multiply through the C kernel (inference/kernels/cpu/quant_linear.py), which widens each
block of codes in registers; with int8 activations asked for, the int8 kernel takes up to
its build's `int8_max_rows` (32 with VNNI or AVX2: a batch of decode steps), over a copy of
the weight 16 rows interleaved where VNNI or AVX2 runs that layout (rows in whole
tiles of 16; a second copy of the codes and scales, made when the layer is first bound),
and then up to `interleaved_max_rows` (any number, prompts too; VNNI beside AMX 64).
Past those rows (prefill chunks beside AMX), and where no kernel is set (other devices, no
compiler), the weight is dequantized for that call, whole in C or in slices of rows by
torch, multiplied by torch, then dropped.

On CUDA, where the device profile found that it runs (`use_triton`), every call takes
the Triton kernel instead (inference/kernels/triton/group_gemm.py), which also widens the
codes in registers.

Loaders hand a layer `GroupQuantized` tensors (GPTQ/AWQ layers, as they are in the file)
or `LazyGroupQuantized` ones (GGUF blocks, read from the file's map a chunk of rows at a
time as the layer copies them; `inference/model/loader/gguf_quant.py`), shard by shard as
they do float ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from inference.kernels.cpu.quant_linear import MAX_KERNEL_ROWS
from inference.model.quant.group_lazy import AnyGroupQuantized, LazyGroupQuantized
from inference.model.quant.group_math import GroupQuantized, code_bytes, dequantize

if TYPE_CHECKING:
    from inference.kernels.cpu.layers import CpuLayerKernels
    from inference.kernels.cpu.quant_linear import BoundWeight, QuantLinearKernel

# A fallback dequantizes at most this many weight values at a time.
DEQUANT_SLICE_ELEMENTS = 1 << 22


class GroupQuantWeights(nn.Module):
    """The packed weight of a (rows, cols) matrix, the base of both layers: ``weight``
    codes, ``weight_scale`` and ``weight_offset``. Only ``weight`` is a parameter, so the
    loader's bookkeeping expects one tensor per shard, the one a `GroupQuantized` fills."""

    weight_scale: torch.Tensor
    weight_offset: torch.Tensor
    # Few rows multiply with x quantized to int8 (`QuantLinearKernel.matmul_int8`): faster,
    # but not the float matmul (docs/engine.md); off unless a caller sets it.
    int8_activations = False

    def __init__(
        self, rows: int, cols: int, *, bits: int, group_size: int, device: torch.device | str
    ) -> None:
        super().__init__()
        probe = GroupQuantized(
            torch.empty(rows, code_bytes(cols, bits), dtype=torch.uint8),
            torch.empty(rows, -(-cols // group_size), dtype=torch.float16),
            torch.empty(rows, -(-cols // group_size), dtype=torch.float16),
            bits, group_size, cols,
        )  # fmt: skip
        probe.check("layer")  # the same checks as a loaded tensor's
        self.bits, self.group_size, self.cols = bits, group_size, cols
        self.weight = nn.Parameter(
            torch.zeros(probe.codes.shape, dtype=torch.uint8, device=device), requires_grad=False
        )
        groups = probe.groups
        self.register_buffer("weight_scale", torch.zeros(rows, groups, dtype=torch.float16,
                                                         device=device))  # fmt: skip
        self.register_buffer("weight_offset", torch.zeros(rows, groups, dtype=torch.float16,
                                                          device=device))  # fmt: skip
        self.kernels: CpuLayerKernels | None = None
        self._bound_weight: BoundWeight | None = None
        self._bound_key: tuple[int | bool, ...] = ()
        self._triton: Callable[[torch.Tensor, GroupQuantized], torch.Tensor] | None = None

    def use_triton(self, enabled: bool) -> None:
        """Take the Triton kernel for every call (only where the device profile's probe
        found that it runs: a layer never changes path mid-serving)."""
        self._triton = None
        if enabled:
            from inference.kernels.triton.group_gemm import group_quant_matmul

            self._triton = group_quant_matmul

    @property
    def packed(self) -> GroupQuantized:
        return GroupQuantized(
            self.weight.data, self.weight_scale, self.weight_offset,
            self.bits, self.group_size, self.cols,
        )  # fmt: skip

    def fill_rows(self, rows: slice, tensor: AnyGroupQuantized, name: str) -> None:
        """Copy a loaded tensor into ``rows``; ValueError if its format or shape differs.
        A lazy one is copied a chunk at a time, straight into the layer's storage."""
        tensor.check(name)
        target = self.packed.select_rows(rows)
        if (tensor.bits, tensor.group_size) != (self.bits, self.group_size):
            raise ValueError(
                f"tensor {name} is {tensor.bits}-bit in groups of {tensor.group_size}; the "
                f"layer holds {self.bits}-bit in groups of {self.group_size}"
            )
        if tensor.shape != target.shape:
            raise ValueError(f"tensor {name} has shape {tensor.shape}, expected {target.shape}")
        if isinstance(tensor, LazyGroupQuantized):
            tensor.fill(target)
            return
        target.codes.copy_(tensor.codes)
        target.scale.copy_(tensor.scale)
        target.offset.copy_(tensor.offset)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ w.T`` for x (T, cols) -> (T, rows) in x's dtype."""
        if self._triton is not None:
            return self._triton(x, self.packed)
        # A decode step calls this over a hundred times: each torch call a row saves counts.
        flat = x.dim() == 2
        x2 = x if flat else x.reshape(-1, x.shape[-1])
        kernel = self.kernels.quant if self.kernels is not None else None
        if kernel is not None:
            y, int8, rows = None, False, x2.shape[0]
            int8_asked = self.int8_activations
            bound = self._bound(kernel) if int8_asked or rows < MAX_KERNEL_ROWS else None
            if int8_asked and bound is not None:  # interleaved weights take more rows
                laid = bound.interleaved is not None
                limit = kernel.interleaved_max_rows if laid else kernel.int8_max_rows
                int8 = limit is None or rows <= limit
            if bound is not None and (int8 or rows < MAX_KERNEL_ROWS):
                y = kernel.matmul_bound(x2, bound, int8=int8)
            if y is not None:
                return y if flat else y.reshape(*x.shape[:-1], -1)
        weight = self.packed
        if kernel is not None and (whole := kernel.dequantize(weight, x.dtype)) is not None:
            return F.linear(x, whole)
        rows = max(1, DEQUANT_SLICE_ELEMENTS // max(1, self.cols))
        parts = [
            F.linear(x, dequantize(weight.select_rows(slice(start, start + rows)), x.dtype))
            for start in range(0, weight.rows, rows)
        ]
        return torch.cat(parts, dim=-1)

    def _bound(self, kernel: QuantLinearKernel) -> BoundWeight | None:
        """The weight as `kernel` takes it, checked once and again only when its storage
        moves (a `.to()`, a reload) or int8 activations are switched: the three pointers and
        the switch are the key. With int8 activations the bound weight also holds the
        interleaved copy the int8 path reads where it runs (`QuantLinearKernel.bind`)."""
        # read from the dicts: nn.Module's attribute lookup costs more than the rest
        codes, buffers = self._parameters["weight"], self._buffers
        scale, offset = buffers["weight_scale"], buffers["weight_offset"]
        if codes is None or scale is None or offset is None:
            return None
        int8 = self.int8_activations
        key = (codes.data_ptr(), scale.data_ptr(), offset.data_ptr(), int8)
        if key != self._bound_key:
            bound = kernel.bind(self.packed, interleave=int8)
            self._bound_weight, self._bound_key = bound, key
        return self._bound_weight

    def _apply(self, fn: Callable[..., object], recurse: bool = True) -> GroupQuantWeights:
        # a move (`.to()`) drops the bound copy, which would keep the old storage alive
        self._bound_weight, self._bound_key = None, ()
        return super()._apply(fn, recurse)

    def lookup(self, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rows ``ids`` of the weight, dequantized to ``dtype``."""
        return dequantize(self.packed.select_rows(ids), dtype)


class GroupQuantLinear(GroupQuantWeights):
    """A `FusedLinear` whose weight is group-quantized: the same shard layout
    (``shard_sizes``, ``shard_rows``, ``load_shard``), so fused q|k|v and gate|up load and
    split as before. Each shard's `GroupQuantized` must have the layer's bits and groups.

    ``input_perm`` (act-order GPTQ, see packed_format.py): the weight's columns are stored
    in this order of the input's, so the input is gathered the same way first."""

    input_perm: torch.Tensor | None

    def __init__(
        self,
        in_features: int,
        shard_sizes: list[int],
        *,
        bits: int,
        group_size: int,
        bias: bool,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        if not shard_sizes or min(shard_sizes) <= 0:
            raise ValueError(f"shard sizes must be positive, got {shard_sizes}")
        super().__init__(
            sum(shard_sizes), in_features, bits=bits, group_size=group_size, device=device
        )
        self.in_features = in_features
        self.shard_sizes = list(shard_sizes)
        self.dtype = dtype
        self.bias = (
            nn.Parameter(torch.zeros(sum(shard_sizes), dtype=dtype, device=device),
                         requires_grad=False)
            if bias
            else None
        )  # fmt: skip
        self.register_buffer("input_perm", None)

    @property
    def rows_in_place(self) -> int | None:
        """The most rows `matmul` multiplies without a float copy of the weight (None: any
        number, on the Triton kernel or the interleaved int8 one, AMX aside; 0: none, as
        with no kernel set)."""
        if self._triton is not None:
            return None
        kernel = self.kernels.quant if self.kernels is not None else None
        if kernel is None:
            return 0
        int8_rows = kernel.int8_rows_for(self.packed) if self.int8_activations else 0
        return None if int8_rows is None else max(MAX_KERNEL_ROWS - 1, int8_rows)

    def set_input_perm(self, perm: torch.Tensor) -> None:
        if tuple(perm.shape) != (self.in_features,):
            raise ValueError(f"input permutation of {perm.shape} for {self.in_features} inputs")
        self.input_perm = perm.to(device=self.weight.device, dtype=torch.int64)

    @property
    def out_features(self) -> int:
        return sum(self.shard_sizes)

    @property
    def num_shards(self) -> int:
        return len(self.shard_sizes)

    def shard_rows(self, shard: int) -> slice:
        start = sum(self.shard_sizes[:shard])
        return slice(start, start + self.shard_sizes[shard])

    def load_shard(
        self, param_name: str, shard: int, tensor: torch.Tensor | AnyGroupQuantized, name: str
    ) -> None:
        rows = self.shard_rows(shard)
        if param_name == "weight" and isinstance(tensor, AnyGroupQuantized):
            self.fill_rows(rows, tensor, name)
        elif param_name == "weight":
            raise ValueError(f"tensor {name} is not quantized; its layer holds quantized codes")
        elif param_name == "bias" and self.bias is not None:
            if not isinstance(tensor, torch.Tensor) or tuple(tensor.shape) != (
                self.shard_sizes[shard],
            ):
                raise ValueError(f"tensor {name} is not a bias of {self.shard_sizes[shard]} rows")
            self.bias.data[rows] = tensor
        else:
            raise ValueError(f"unexpected tensor {name}: the layer has no {param_name}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, in) -> (T, sum(shards))
        if self.input_perm is not None:
            x = x.index_select(-1, self.input_perm)
        y = self.matmul(x)
        return y if self.bias is None else y + self.bias

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, shard_sizes={self.shard_sizes}, "
            f"bits={self.bits}, group_size={self.group_size}, "
            f"bias={self.bias is not None}"
        )


class GroupQuantEmbedding(GroupQuantWeights):
    """A token embedding kept as group-quantized rows; also the tied output projection
    (the same codes read as a (vocab, hidden) weight), so a tied model holds one table."""

    def __init__(
        self,
        vocab_size: int,
        hidden: int,
        *,
        bits: int,
        group_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        super().__init__(vocab_size, hidden, bits=bits, group_size=group_size, device=device)
        self.dtype = dtype

    def load_shard(
        self, param_name: str, shard: int, tensor: torch.Tensor | AnyGroupQuantized, name: str
    ) -> None:
        if param_name != "weight" or shard != 0 or isinstance(tensor, torch.Tensor):
            raise ValueError(f"tensor {name} does not fit a quantized embedding table")
        self.fill_rows(slice(None), tensor, name)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # (T,) -> (T, hidden)
        return self.lookup(input_ids, self.dtype)

    def unembed(self, hidden: torch.Tensor) -> torch.Tensor:  # (N, hidden) -> (N, vocab)
        return self.matmul(hidden)

    def extra_repr(self) -> str:
        rows, cols = self.packed.shape
        return f"{rows}, {cols}, bits={self.bits}, group_size={self.group_size}"
