"""The Triton kernels compile for a Hopper GPU (sm_90), checked here without one.

The CPU tests run the kernels under triton's interpreter, which accepts code the compiler
rejects; this builds real cubins (triton's wheel carries ptxas). It runs in a fresh
process because the kernel tests' conftest re-imports the kernels for the interpreter.
Each compile-time branch the engine can take is built once: FP8 and bf16 pools, one
decode split and several (and the kernel that combines them), int32 lengths (an eager
step's plan) and int64 ones (a CUDA graph's buffer), GQA groups of 1 and 3, the FP8
matmul's decode and prefill tiles, the FP8 quantizer, the few-token FP8 matmul and the
group-quantized matmul's 4- and 8-bit tiles and its sum of K splits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from inference.kernels.triton import (
        chunk_attention, decode_attention, fp8_gemv, fp8_matmul, fp8_quant, group_gemm, kv_write,
    )

    def build(fn, signature, constants):
        signature = {**signature, **dict.fromkeys(constants, "constexpr")}
        kernel = triton.compile(ASTSource(fn, signature, constants), GPUTarget("cuda", 90, 32))
        assert kernel.asm["cubin"], fn

    strides = lambda *names: dict.fromkeys(names, "i32")
    fp8 = {"k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32"}
    for pool in ("*u8", "*bf16"):  # an FP8 pool is written through a uint8 view
        build(
            kv_write._reshape_and_cache_kernel,
            {"key_ptr": "*bf16", "value_ptr": "*bf16", "key_cache_ptr": pool,
             "value_cache_ptr": pool, "slot_ptr": "*i64", **fp8,
             **strides("stride_kt", "stride_kh", "stride_vt", "stride_vh",
                       "stride_cache_slot", "stride_cache_head")},
            {"NUM_HEADS": 3, "BLOCK_H": 4, "HEAD_DIM": 128, "BLOCK_D": 128,
             "IS_FP8": pool == "*u8"},
        )
    build(
        fp8_quant._per_token_quant_kernel,
        {"x_ptr": "*bf16", "q_ptr": "*u8", "scale_ptr": "*fp32", "K": "i32",
         **strides("stride_xm", "stride_qm")},
        {"BLOCK_K": 1024},
    )
    for block_n, block_k in ((32, 128), (64, 512)):
        build(
            fp8_gemv._fp8_gemv_kernel,
            {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "y_ptr": "*bf16",
             "M": "i32", "N": "i32", "K": "i32", **strides("stride_xm", "stride_wn", "stride_ym")},
            {"BLOCK_M": 16, "BLOCK_N": block_n, "BLOCK_K": block_k, "DOT_DTYPE": tl.bfloat16,
             "DOT_PRECISION": "tf32"},
        )
    # A CUDA graph's lengths come from its int64 buffer, an eager step's plan is int32.
    for pool, lens, split in (("*fp8e4nv", "*i32", True), ("*bf16", "*i64", False)):
        attention = {"q_ptr": "*bf16", "k_cache_ptr": pool, "v_cache_ptr": pool,
                     "block_tables_ptr": "*i64", "seq_lens_ptr": lens, "seq_idx_ptr": "*i32",
                     "out_ptr": "*bf16", **fp8, "softmax_scale": "fp32", "block_size": "i32",
                     **strides("stride_qt", "stride_qh", "stride_ot", "stride_oh",
                               "stride_bt", "stride_cb", "stride_cs", "stride_ch")}
        dots = {"IS_FP8": pool == "*fp8e4nv", "DOT_DTYPE": tl.bfloat16, "DOT_PRECISION": "tf32"}
        build(
            decode_attention._decode_kernel,
            {**attention, "rows_ptr": "*i32", "part_acc_ptr": "*fp32", "part_max_ptr": "*fp32",
             "part_sum_ptr": "*fp32", "num_splits": "i32"},
            {"GROUP": 4, "BLOCK_G": 16, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_N": 64,
             "SPLIT": split, **dots},
        )
        build(
            decode_attention._combine_splits_kernel,
            {"rows_ptr": "*i32", "out_ptr": "*bf16", "part_acc_ptr": "*fp32",
             "part_max_ptr": "*fp32", "part_sum_ptr": "*fp32", "v_scale_ptr": "*fp32",
             "num_splits": "i32", **strides("stride_ot", "stride_oh")},
            {"HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_S": 8, "IS_FP8": pool == "*fp8e4nv"},
        )
        for group in (1, 3):  # one query head per KV head: BLOCK_G 1, 64-token tiles
            block_g = triton.next_power_of_2(group)
            build(
                chunk_attention._chunk_kernel,
                {**attention, "query_start_ptr": "*i32"},
                {"GROUP": group, "HEAD_DIM": 64, "BLOCK_D": 64, "BLOCK_G": block_g,
                 "BLOCK_Q": 64 // block_g, "BLOCK_N": 64, **dots},
            )
    # Decode and prefill tiles; whole groups in a tile (16) and a group wider than it (128).
    for group_k, block_m in ((16, 16), (128, 64)):
        build(
            fp8_matmul._grouped_fp8_matmul_kernel,
            {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "y_ptr": "*bf16",
             "M": "i32", "N": "i32", "K": "i32",
             **strides("stride_xm", "stride_wn", "stride_sn", "stride_ym")},
            {"GROUP_K": group_k, "GROUPS_PER_TILE": fp8_matmul.groups_per_tile(group_k, 64),
             "BLOCK_M": block_m, "BLOCK_N": 64, "BLOCK_K": 64,
             "DOT_DTYPE": tl.bfloat16, "DOT_PRECISION": "tf32", "IS_BF16": True},
        )
    # Group-quantized: 4-bit decode tiles writing split partials (groups of 32, 4 a tile;
    # 96, inside 32-column tiles) and the sum of splits, 4-bit prefill tiles inside groups
    # of 128, 8-bit decode tiles.
    for bits, group_k, block_m, block_n, block_k, out in (
        (4, 32, 16, 32, 128, "*fp32"), (4, 96, 16, 32, 32, "*fp32"),
        (4, 128, 64, 64, 64, "*bf16"), (8, 64, 16, 32, 128, "*bf16"),
    ):
        per_tile = group_gemm.groups_per_tile(group_k, block_k)
        build(
            group_gemm._group_gemm_kernel,
            {"x_ptr": "*bf16", "c_ptr": "*u8", "s_ptr": "*fp16", "o_ptr": "*fp16", "y_ptr": out,
             "M": "i32", "N": "i32", "K": "i32", "code_bytes": "i32", "num_groups": "i32",
             "k_tiles": "i32", "tiles_per_split": "i32",
             **strides("stride_xm", "stride_cn", "stride_sn", "stride_on", "stride_ym",
                       "stride_ysplit")},
            {"BITS": bits, "GROUP": group_k, "GROUPS_PER_TILE": per_tile,
             "WIDTH": block_k // per_tile, "BLOCK_M": block_m, "BLOCK_N": block_n,
             "BLOCK_K": block_k, "DOT_DTYPE": tl.bfloat16, "DOT_PRECISION": "tf32",
             "ROUND_BF16": False},  # a GPU rounds in its own cast
        )
    build(
        group_gemm._sum_splits_kernel,
        {"p_ptr": "*fp32", "y_ptr": "*bf16", "total": "i32", "num_splits": "i32"},
        {"BLOCK": 1024},
    )
    # The number of decode splits changes as contexts grow: were it compiled in, each new
    # value would build both kernels again in the middle of serving.
    for kernel in (decode_attention._decode_kernel, decode_attention._combine_splits_kernel):
        assert not {p.name: p.is_constexpr for p in kernel.params}["num_splits"], kernel
    print("compiled")
    """
)


def test_kernels_compile_for_sm90() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # today's default, stated to silence its warning
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "compiled"
