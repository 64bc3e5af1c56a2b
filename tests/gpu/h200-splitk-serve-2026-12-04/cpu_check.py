"""The patch's kernel on a CPU with Triton's interpreter (TRITON_INTERPRET=1), before any device call.

The kernel part of patches/vllm/0004-splitk-gemv-one-token.patch (run as 0001-... from this folder; its added lines from '# >>> gpuserve.llm' to
'# <<< gpuserve.llm kernel': the two Triton kernels, the config rule, the launcher, the workspace) is taken from the
patch text itself, written to a module with the imports vLLM's file gives it, and run on small shapes: every
reduction (direct, atomic + finish, counter), EVEN and masked loops (K not a multiple of BLOCK_K, N not a multiple of
BLOCK_N), both accumulators (ACC2D), splits that do not divide K, and the weight scale read through strides (stored
transposed, as a view: the same output as the contiguous scale). Each output is compared with float32 of the
dequantised numbers (activation quantised by torch as per_token_group_fp8_quant does, and the bf16 activation), the
split variants with the unsplit one, and the workspace must be zero after every call. The interpreter's float32 -> fp8
rounding differs from torch's on some values (../h200-splitk-gemv-2026-12-04/report.md), hence 3 % against the
torch-quantised reference and 0.6 % against the reference quantised by the interpreter (a Triton kernel of
the same rule); the variants against each other share the interpreter's rounding.

    TRITON_INTERPRET=1 /tmp/gemv-venv/bin/python tests/gpu/h200-splitk-serve-2026-12-04/cpu_check.py
"""
import importlib.util
import os
import sys
import tempfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
PATCH = os.path.join(HERE, "..", "..", "..", "patches", "vllm", "0004-splitk-gemv-one-token.patch")  # landed there
HEADER = "import torch\nimport triton\nimport triton.language as tl\n"
QUANT = """

@triton.jit
def _interp_quant(x_ptr, y_ptr):  # the kernel's quantisation alone: one group of 128, dequantised
    offs = tl.program_id(0) * 128 + tl.arange(0, 128)
    x = tl.load(x_ptr + offs).to(tl.float32)
    s = tl.maximum(tl.max(tl.abs(x), axis=0), 1e-10) / 448.0
    q = tl.clamp(x / s, -448.0, 448.0).to(tl.float8e4nv)
    tl.store(y_ptr + offs, q.to(tl.float32) * s)
"""


def kernel_module():
    lines, on = [], False
    with open(PATCH) as f:
        for line in f:
            if line.startswith("+# >>> gpuserve.llm"):
                on = True
            if on:
                lines.append(line[1:])
            if line.startswith("+# <<< gpuserve.llm kernel"):
                break
    body = "".join(lines).replace('os.environ.get("GPUSERVE_SPLITK_GEMV", "1")', '"1"')
    path = os.path.join(tempfile.mkdtemp(prefix="gpuserve-gemv-"), "gemv_from_patch.py")
    with open(path, "w") as f:
        f.write(HEADER + body + QUANT)
    spec = importlib.util.spec_from_file_location("gemv_from_patch", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())


def main():
    assert os.environ.get("TRITON_INTERPRET") == "1", "run with TRITON_INTERPRET=1"
    g = kernel_module()
    torch.manual_seed(0)
    fails = 0
    # (N, K, configs): (BLOCK_N, BLOCK_K, warps, SPLIT_K, reduction)
    cases = [
        (256, 1408, [(128, 128, 4, 1, "direct"), (128, 128, 4, 11, "atomic"), (128, 128, 4, 11, "counter"),
                     (128, 128, 8, 11, "atomic"), (64, 512, 8, 2, "counter"), (64, 512, 8, 1, "direct"),
                     (128, 128, 4, 4, "counter")]),
        (320, 1024, [(64, 512, 8, 1, "direct"), (64, 512, 8, 2, "counter"), (128, 128, 8, 3, "atomic"),
                     (128, 128, 4, 8, "counter")]),
    ]
    print("fallback configs (132 SMs):", {s: g._gpuserve_gemv_config(*s, 132) for s in
                                          [(14336, 4096), (4096, 12288), (2816, 4096), (4096, 1408), (1024, 4096),
                                           (8192, 2048), (4096, 4096)]})
    for n, k, cfgs in cases:
        w = (torch.randn(n, k) * 0.5).to(torch.float8_e4m3fn)
        s = torch.rand((n + 127) // 128, (k + 127) // 128) * 2e-3 + 1e-3
        s_t = s.t().contiguous().t()  # the same values, stored transposed: strides (1, N/128)
        wd = w.float() * s.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        x = torch.randn(1, k)
        x[0, ::97] *= 30.0
        x = x.to(torch.bfloat16)
        gx = x.float().view(1, -1, 128)
        sx = gx.abs().amax(dim=2, keepdim=True).clamp(min=1e-10) / 448.0
        xq = ((gx / sx).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * sx).view(1, k)
        ref_q, ref_x = xq @ wd.t(), x.float() @ wd.t()
        xi = torch.empty(1, k)
        g._interp_quant[(k // 128,)](x, xi)  # the interpreter's own fp8 rounding
        ref_i = xi @ wd.t()
        print("N %d K %d: activations the interpreter rounds otherwise than torch: %d of %d" % (
            n, k, int((xi != xq).sum()), k))
        base, last = None, None
        for cfg in cfgs:
            for scale, tag in ((s, "contiguous"), (s_t, "strided %s" % (tuple(s_t.stride()),))):
                acc, cnt = g._gpuserve_workspace(n, "cpu")
                out = torch.full((1, n), float("nan"), dtype=torch.bfloat16)
                g._gpuserve_gemv_launch(x, w, scale, out, acc, cnt, cfg, fence=False)
                zero = bool((acc == 0).all()) and bool((cnt == 0).all())
                if base is None:
                    base = out.clone()
                e_q, e_x, e_b, e_i = rel(out, ref_q), rel(out, ref_x), rel(out, base), rel(out, ref_i)
                ok = zero and bool(torch.isfinite(out).all()) and e_q < 0.03 and e_b < 0.006 and e_i < 0.006
                if tag != "contiguous":
                    ok = ok and torch.equal(out, last)
                last = out
                fails += not ok
                print("%s N %d K %d %-32s %-18s vs fp32 (x quantised: interpreter %.4f, torch %.4f), (bf16 x) %.4f, first variant %.4f, "
                      "workspace zero %s%s" % ("ok  " if ok else "FAIL", n, k, cfg, tag, e_i, e_q, e_x, e_b, zero,
                                               "" if tag == "contiguous" else ", equal to contiguous %s"
                                               % torch.equal(out, last)))
    print("failures:", fails)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
