"""The Triton kernels compile for a Hopper GPU (sm_90), checked here without one.

The CPU tests run the kernels under triton's interpreter, which accepts code the compiler
rejects; this builds real cubins (triton's wheel carries ptxas). It runs in a fresh
process because the kernel tests' conftest re-imports the kernels for the interpreter.
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
    from inference.kernels.triton import chunk_attention, decode_attention, fp8_matmul, kv_write

    def build(fn, signature, constants):
        signature = {**signature, **dict.fromkeys(constants, "constexpr")}
        kernel = triton.compile(ASTSource(fn, signature, constants), GPUTarget("cuda", 90, 32))
        assert kernel.asm["cubin"], fn

    strides = lambda *names: dict.fromkeys(names, "i32")
    fp8 = {"k_scale_ptr": "*fp32", "v_scale_ptr": "*fp32"}
    build(
        kv_write._reshape_and_cache_kernel,
        {"key_ptr": "*bf16", "value_ptr": "*bf16", "key_cache_ptr": "*fp8e4nv",
         "value_cache_ptr": "*fp8e4nv", "slot_ptr": "*i64", **fp8,
         **strides("stride_kt", "stride_kh", "stride_vt", "stride_vh", "stride_cache_slot",
                   "stride_cache_head")},
        {"NUM_HEADS": 8, "BLOCK_H": 8, "HEAD_DIM": 128, "BLOCK_D": 128, "IS_FP8": True},
    )
    attention = {"q_ptr": "*bf16", "k_cache_ptr": "*fp8e4nv", "v_cache_ptr": "*fp8e4nv",
                 "block_tables_ptr": "*i64", "seq_lens_ptr": "*i32", "seq_idx_ptr": "*i32",
                 "out_ptr": "*bf16", **fp8, "softmax_scale": "fp32", "block_size": "i32",
                 **strides("stride_qt", "stride_qh", "stride_ot", "stride_oh", "stride_bt",
                           "stride_cb", "stride_cs", "stride_ch")}
    dots = {"IS_FP8": True, "DOT_DTYPE": tl.bfloat16, "DOT_PRECISION": "tf32"}
    build(
        decode_attention._decode_kernel,
        {**attention, "rows_ptr": "*i32", "part_acc_ptr": "*fp32", "part_max_ptr": "*fp32",
         "part_sum_ptr": "*fp32", "split_len": "i32"},
        {"GROUP": 4, "BLOCK_G": 16, "HEAD_DIM": 128, "BLOCK_D": 128, "BLOCK_N": 64,
         "NUM_SPLITS": 8, **dots},
    )
    build(
        chunk_attention._chunk_kernel,
        {**attention, "query_start_ptr": "*i32"},
        {"GROUP": 3, "HEAD_DIM": 64, "BLOCK_D": 64, "BLOCK_G": 4, "BLOCK_Q": 16,
         "BLOCK_N": 64, **dots},
    )
    build(
        fp8_matmul._grouped_fp8_matmul_kernel,
        {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "s_ptr": "*fp32", "y_ptr": "*bf16",
         "M": "i32", "N": "i32", "K": "i32",
         **strides("stride_xm", "stride_wn", "stride_sn", "stride_ym")},
        {"GROUP_K": 16, "BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 64, "DOT_DTYPE": tl.bfloat16,
         "DOT_PRECISION": "tf32", "IS_BF16": True},
    )
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
