"""GPTQ and AWQ layers as numbers: their packed int32 tensors turned into `GroupQuantized`.

Both store, per linear layer, unsigned codes ``q`` of ``bits`` bits, a float16 ``scale`` and
an integer ``zero`` per (group of input columns, output row), meaning::

    w[out, in] = scale[g, out] * (q[in, out] - zero[g, out])      g = the column's group

- GPTQ (AutoGPTQ, GPTQModel, optimum): ``qweight`` int32 (in * bits / 32, out) packs
  32 / bits consecutive INPUT rows in each word, the first in the low bits; ``qzeros`` int32
  (groups, out * bits / 32) packs consecutive OUTPUT columns the same way; ``scales``
  (groups, out); ``g_idx`` int32 (in,) names each input column's group. The original
  format ("gptq", v1) stores ``zero - 1`` (AutoGPTQ's off-by-one, kept for compatibility:
  readers add 1 after masking, so a stored 15 means 16); "gptq_v2" stores ``zero``.
  With act-order (desc_act) columns were quantized in another order and ``g_idx`` is not
  sorted: a group is then a scattered set of columns.
- AWQ (AutoAWQ "GEMM"): ``qweight`` int32 (in, out / 8) packs 8 OUTPUT columns a word in
  the interleaved order 0, 2, 4, 6, 1, 3, 5, 7 (nibble i holds column ORDER[i]); ``qzeros``
  (groups, out / 8) the same way; ``scales`` (groups, out); zeros are stored as they are.

Our layout (group_math.py) is ``scale * code + offset``, so ``offset = -scale * zero``,
rounded to float16: exact when ``zero`` is a power of two (symmetric GPTQ: 8 or 128),
otherwise within half a float16 ulp of ``scale * zero`` (at most ``15 * scale / 2048``
for 4 bits, a 137th of a step). An act-order layer's columns are stored sorted by group
(a stable sort, so each group is contiguous) and the layer permutes its input the same
way (``input_perm``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from inference.model.quant.group_math import BLOCK, GroupQuantized, pack_codes, padded_cols

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)  # nibble i of a word holds column AWQ_ORDER[i]
AWQ_COLUMN_NIBBLE = tuple(AWQ_ORDER.index(column) for column in range(8))
# Parts of a quantized linear in a checkpoint (``bias`` is an ordinary tensor).
GPTQ_PARTS = ("qweight", "qzeros", "scales", "g_idx")
AWQ_PARTS = ("qweight", "qzeros", "scales")
GPTQ_FORMATS = {"gptq": 1, "gptq_v2": 0}  # checkpoint_format -> what to add to stored zeros


@dataclass(frozen=True)
class PackedFormat:
    """A checkpoint's quantization_config, checked: what its layers hold."""

    method: str  # "gptq" or "awq"
    bits: int
    group_size: int  # -1: one group spans the whole row
    zero_offset: int  # added to the stored zeros (1 for GPTQ v1)
    desc_act: bool = False

    @property
    def parts(self) -> tuple[str, ...]:
        return GPTQ_PARTS if self.method == "gptq" else AWQ_PARTS

    def describe(self) -> str:
        group = "per row" if self.group_size == -1 else f"groups of {self.group_size}"
        order = ", act-order" if self.desc_act else ""
        return f"{self.method.upper()} {self.bits}-bit, {group}{order}"

    def layer_group_size(self, in_features: int) -> int:
        """The group size our layer holds: -1 becomes one group of the padded row."""
        return padded_cols(in_features) if self.group_size == -1 else self.group_size


def read_packed_format(config: object) -> PackedFormat | None:
    """The format a config.json ``quantization_config`` declares; None when it declares
    neither GPTQ nor AWQ; ValueError for variants whose layout we do not read."""
    if not isinstance(config, dict) or config.get("quant_method") not in ("gptq", "awq"):
        return None
    method = str(config["quant_method"])
    bits = config.get("bits", config.get("w_bit"))
    group_size = config.get("group_size", config.get("q_group_size", -1))
    allowed_bits = (4, 8) if method == "gptq" else (4,)
    if not isinstance(bits, int) or bits not in allowed_bits:
        raise ValueError(
            f"{method.upper()} checkpoint with {bits}-bit weights is not supported; "
            f"only {' or '.join(map(str, allowed_bits))}-bit"
        )
    if not isinstance(group_size, int) or not (
        group_size == -1 or (group_size > 0 and group_size % BLOCK == 0)
    ):
        raise ValueError(
            f"{method.upper()} group size {group_size!r} is not supported: it must be a "
            f"multiple of {BLOCK} (32, 64, 128...) or -1 (one group a row)"
        )
    if method == "awq":
        version = str(config.get("version", "gemm")).lower()
        if version != "gemm":
            raise ValueError(
                f"AWQ version {version!r} is not supported; only 'gemm' (the layout "
                "AutoAWQ saves by default)"
            )
        if config.get("zero_point", True) is not True:
            raise ValueError("AWQ without zero points is not supported")
        return PackedFormat("awq", bits, group_size, zero_offset=0)
    layout = str(config.get("checkpoint_format", config.get("format", "gptq")))
    if layout not in GPTQ_FORMATS:
        raise ValueError(
            f"GPTQ checkpoint format {layout!r} is not supported; only 'gptq' or 'gptq_v2'"
        )
    if config.get("pack_dtype", "int32") != "int32":
        raise ValueError(f"GPTQ pack_dtype {config.get('pack_dtype')!r}: only int32 is read")
    if config.get("dynamic"):
        raise ValueError("GPTQ per-module overrides ('dynamic') are not supported")
    if config.get("lm_head"):
        raise ValueError("a GPTQ-quantized lm_head is not supported")
    return PackedFormat(
        "gptq", bits, group_size, GPTQ_FORMATS[layout], desc_act=bool(config.get("desc_act"))
    )


def _unpack_words(words: torch.Tensor, bits: int, dim: int) -> torch.Tensor:
    """int32 words -> one uint8 value a field, the fields of each word laid out along
    ``dim`` (0: rows, 1: columns), the low bits first. One field at a time, so no
    temporary is wider than the words themselves."""
    per, mask = 32 // bits, (1 << bits) - 1
    rows, cols = words.shape
    if dim == 0:  # (words, cols) -> (words * per, cols)
        out = torch.empty(rows, per, cols, dtype=torch.uint8)
        fields = [out[:, k, :] for k in range(per)]
    else:  # (rows, words) -> (rows, words * per)
        out = torch.empty(rows, cols, per, dtype=torch.uint8)
        fields = [out[:, :, k] for k in range(per)]
    for k, field in enumerate(fields):
        field.copy_((words >> (bits * k)) & mask)
    return out.reshape(rows * per, cols) if dim == 0 else out.reshape(rows, cols * per)


def _awq_columns(values: torch.Tensor) -> torch.Tensor:
    """Columns unpacked in AWQ's nibble order -> columns in their own order."""
    rows = values.shape[0]
    return values.reshape(rows, -1, 8)[:, :, list(AWQ_COLUMN_NIBBLE)].reshape(rows, -1)


def input_permutation(g_idx: torch.Tensor) -> torch.Tensor | None:
    """The column order that makes each group contiguous (stable, so columns keep their
    order within a group); None when ``g_idx`` is already sorted."""
    g = g_idx.to(torch.int64)
    if g.numel() < 2 or bool((g[1:] >= g[:-1]).all()):
        return None
    return torch.sort(g, stable=True).indices


def _tensor(parts: dict[str, torch.Tensor], part: str, name: str) -> torch.Tensor:
    tensor = parts.get(part)
    if tensor is None:
        raise ValueError(f"quantized layer {name} has no {part}")
    if tensor.dim() != (1 if part == "g_idx" else 2):
        raise ValueError(f"tensor {name}.{part} has shape {tuple(tensor.shape)}")
    return tensor


def convert_packed(
    fmt: PackedFormat, parts: dict[str, torch.Tensor], name: str
) -> tuple[GroupQuantized, torch.Tensor | None]:
    """One layer's checkpoint parts -> our weight, and the input permutation it needs
    (act-order) or None. ValueError for parts that do not fit together."""
    qweight, qzeros = _tensor(parts, "qweight", name), _tensor(parts, "qzeros", name)
    scales = _tensor(parts, "scales", name)
    for part, tensor in (("qweight", qweight), ("qzeros", qzeros)):
        if tensor.dtype != torch.int32:
            raise ValueError(f"tensor {name}.{part} is {tensor.dtype}; expected int32")
    if not scales.is_floating_point():
        raise ValueError(f"tensor {name}.scales is {scales.dtype}; expected float16")
    if fmt.method == "gptq":
        q = _unpack_words(qweight, fmt.bits, dim=0)  # (in, out)
        zeros = _unpack_words(qzeros, fmt.bits, dim=1)
    else:
        q = _awq_columns(_unpack_words(qweight, fmt.bits, dim=1))
        zeros = _awq_columns(_unpack_words(qzeros, fmt.bits, dim=1))
    cols, rows = q.shape
    group_size = fmt.layer_group_size(cols)
    groups = -(-cols // group_size)
    if tuple(scales.shape) != (groups, rows) or zeros.shape[0] != groups or (zeros.shape[1] < rows):
        raise ValueError(
            f"quantized layer {name}: scales {tuple(scales.shape)} and qzeros "
            f"{tuple(qzeros.shape)} do not fit {groups} groups of {rows} outputs"
        )
    zero = zeros[:, :rows].T.float() + fmt.zero_offset  # (out, groups); v1's 255 + 1 too
    scale = scales.T.to(torch.float16).contiguous()
    offset = (-scale.float() * zero).to(torch.float16)
    if not (torch.isfinite(scale).all() and torch.isfinite(offset).all()):
        raise ValueError(f"quantized layer {name}: a scale or -scale*zero is not finite in float16")
    perm = None
    if "g_idx" in parts:
        g_idx = _tensor(parts, "g_idx", name)
        if g_idx.shape[0] != cols:
            raise ValueError(f"tensor {name}.g_idx has {g_idx.shape[0]} entries, not {cols}")
        perm = input_permutation(g_idx)
        ordered = g_idx.to(torch.int64) if perm is None else g_idx.to(torch.int64)[perm]
        if not torch.equal(ordered, torch.arange(cols) // group_size):
            raise ValueError(f"tensor {name}.g_idx does not put {group_size} columns in each group")
    codes = (q if perm is None else q[perm]).T  # (out, in), groups contiguous; whole rows gathered
    packed = GroupQuantized(pack_codes(codes, fmt.bits), scale, offset, fmt.bits, group_size, cols)
    packed.check(name)
    return packed, perm
