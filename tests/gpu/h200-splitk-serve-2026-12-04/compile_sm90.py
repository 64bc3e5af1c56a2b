"""The patch's GEMV kernel compiled for sm_90 on a machine without a GPU (Triton 3.6.0's own ptxas), for the four
measured configs and the fallback rule's config of a 1024 x 4096 shape, EVEN and masked:

    /tmp/gemv-venv/bin/python tests/gpu/h200-splitk-serve-2026-12-04/compile_sm90.py
"""
import importlib.util
import os

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

os.environ.pop("TRITON_INTERPRET", None)
SPEC = importlib.util.spec_from_file_location("cpu_check", os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                        "cpu_check.py"))
CPU_CHECK = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(CPU_CHECK)
SIG = {"x_ptr": "*bf16", "w_ptr": "*fp8e4nv", "ws_ptr": "*fp32", "c_ptr": "*bf16", "acc_ptr": "*fp32", "cnt_ptr": "*i32",
       "N": "i32", "K": "i32", "k_per_split": "i32", "stride_wn": "i32", "stride_sn": "i32", "stride_sk": "i32"}


def main():
    g = CPU_CHECK.kernel_module()
    shapes = list(g._GPUSERVE_GEMV_CONFIGS.items()) + [((1024, 4096), g._gpuserve_gemv_config(1024, 4096, 132))]
    for (n, k), (bn, bk, warps, split_k, red) in shapes:
        for even in (True, False):
            consts = {"BLOCK_N": bn, "BLOCK_K": bk, "ACC2D": bn * bk <= 64 * 32 * warps,
                      "REDUCE": g._GPUSERVE_REDUCE[red] if split_k > 1 else 0, "EVEN": even, "FENCE": True}
            src = ASTSource(fn=g._gpuserve_gemv_kernel, signature=dict(SIG, **{c: "constexpr" for c in consts}),
                            constexprs=consts)
            try:
                kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                        options={"num_warps": warps, "num_stages": 1})
                print(n, k, consts, "compiled, shared", kernel.metadata.shared, "bytes")
            except Exception as e:  # pylint: disable=broad-except
                print(n, k, consts, "FAILED", repr(e)[:400])


if __name__ == "__main__":
    main()
