"""Issue 37, kernel work: a Triton split-K GEMV for 1-4 tokens with block-FP8 weights, on the block-FP8 linears of
the full GLM-4.6V-FP8 text shape, measured as ../h200-tuning-2026-12-03/linear_bench.py measured vLLM's kernels.

Layout as vLLM 0.26.0 holds a block-FP8 checkpoint: weight [N, K] float8 e4m3, weight scale [N/128, K/128] float32
(one per 128 x 128 block); output bf16 [M, N]. The activation comes in three ways (ACT):
  0 fp8   float8 e4m3 [M, K] with one float32 scale a token a 128-column group [M, K/128], made beforehand by a
          separate Triton kernel (_quant_kernel, vLLM's per_token_group_fp8_quant rule: scale = max(amax, 1e-10) / 448)
  1 q     bf16 [M, K], quantised to fp8 by that rule inside the GEMV (each program quantises the groups it reads):
          the served W8A8 numbers, with no separate quantisation kernel
  2 wo    bf16 [M, K] used as it is (weight-only FP8, as vLLM's Marlin FP8 does): no activation quantisation
and the products run on the CUDA cores (fma: fp8 -> fp32, scaled activation, fp32 sums) or on the tensor cores (dot:
fp8 x fp8 tl.dot of a weight tile [BLOCK_N, 128] with the activation padded to 16 rows, swap-AB as DeepGEMM's).

K is split across SPLIT_K programs (grid: N / BLOCK_N tiles x SPLIT_K); the splits are summed (REDUCE) by
  direct    no split (SPLIT_K 1): bf16 stored by the one program
  counter   fp32 atomics into a zeroed workspace, a gpu-scope fence, then a per-tile counter: the last split of a
            tile reads the sums back (atomic exchange with 0, so the workspace is zero again), stores bf16 and resets
            the counter: one kernel a call, workspace 4 x N fp32 + N / 16 int32 that every call can share
  atomic    fp32 atomics into a zeroed workspace, then a second kernel converts to bf16 and zeroes the workspace
  partials  each split stores its fp32 partial [SPLIT_K, M, N], a second kernel sums them into bf16

Method (as linear_bench.py): each shape's calls of one decode step (46 attention, 45 shared-expert) each with its own
weight copy, so weights stream from HBM, captured in one CUDA graph and replayed REPLAYS times between CUDA events,
REPEATS times: microseconds a call, median [min, max]. A grid of BLOCK_N, BLOCK_K, SPLIT_K, num_warps, num_stages
is searched per shape with a short timing (SCREEN_REPLAYS, one repeat); the best points are then timed in full.
Every point's outputs (all the step's calls, after the replays) are checked against float32 of the dequantised
numbers (relative error ||out - ref|| / ||ref||; ref with the activation quantised as the kernel's rule for ACT 0/1,
the bf16 activation itself for ACT 2). The copy bandwidth (2 GiB device copy, read + write) is measured first.

    python3 splitk_bench.py OUTDIR [BUDGET_S=220]         on the GPU: writes OUTDIR/splitk-bench.json after each point
    TRITON_INTERPRET=1 python3 splitk_bench.py OUTDIR check   on a CPU (Triton's interpreter): small shapes, every
                                                          variant and reduction, correctness only
No GPU setting is changed.
"""
import json
import math
import os
import subprocess
import sys
import time

import torch
import triton
import triton.language as tl

OUT = sys.argv[1]
CHECK = len(sys.argv) > 2 and sys.argv[2] == "check"
BUDGET_S = float(sys.argv[2]) if len(sys.argv) > 2 and not CHECK else 220.0
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEV = "cpu" if INTERPRET else "cuda"
T0 = time.time()
REPLAYS = int(os.environ.get("REPLAYS", "20"))
REPEATS = int(os.environ.get("REPEATS", "5"))
SCREEN_REPLAYS = int(os.environ.get("SCREEN_REPLAYS", "5"))
GROUP = 128
MAX_REL_ERROR = 0.02  # a point with a larger relative error is reported, never chosen
FP8_MAX = 448.0
# name: (N, K, calls a decode step), as linear_bench.py
SHAPES = {
    "qkv_proj": (14336, 4096, 46),
    "o_proj": (4096, 12288, 46),
    "shared_gate_up": (2816, 4096, 45),
    "shared_down": (4096, 1408, 45),
}
# the served kernel (flashinfer's DeepGEMM swap-AB) at one token, 2026-12-02's profile (linear_bench.py's figures)
SERVED_US_M1 = {"qkv_proj": 759.6 / 46, "o_proj": 807.5 / 46, "shared_gate_up": 326.9 / 45, "shared_down": 209.7 / 45}
SERVED_QUANT_MS_M1 = 0.2916  # scale_1x128, 182 calls a step (4 a layer)
STEP_MS, STEP_TOK_S = 6.58, 150.7
ACTS = {"fp8": 0, "q": 1, "wo": 2}
REDUCES = {"direct": 0, "atomic": 1, "partials": 2, "counter": 3}
RESULT = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "budget_s": BUDGET_S, "replays": REPLAYS,
          "repeats": REPEATS, "screen_replays": SCREEN_REPLAYS,
          "shapes": {k: {"N": v[0], "K": v[1], "calls_a_step": v[2]} for k, v in SHAPES.items()},
          "served_us_m1": SERVED_US_M1, "served_quant_ms_m1": SERVED_QUANT_MS_M1, "screen": [], "points": [],
          "skipped": [], "errors": []}


# ---------------------------------------------------------------------------------------------------------- kernels
@triton.jit
def _fence(x):
    # every thread's gpu-scope fence after its atomics (CUDA's threadFenceReduction pattern); x only carries it
    return tl.inline_asm_elementwise("fence.acq_rel.gpu;\n\tmov.u32 $0, $1;", "=r,r", [x], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _row(x_ptr, xs_ptr, mi, K, groups, offs_k, k_hi, g0, offs_j, w_s, ACT: tl.constexpr, KB: tl.constexpr,
         BLOCK_K: tl.constexpr):
    """One token's activation for a CUDA-core step, times the activation's and the weight's scales: [BLOCK_K]."""
    x_ok = offs_k < k_hi
    if ACT == 0:
        q = tl.load(x_ptr + mi * K + offs_k, mask=x_ok, other=0.0).to(tl.float32)
        x_s = tl.load(xs_ptr + mi * groups + g0 + offs_j, mask=(g0 + offs_j) < groups, other=0.0)
        xd = tl.reshape(tl.reshape(q, [KB, 128]) * (x_s * w_s)[:, None], [BLOCK_K])
    elif ACT == 1:
        x = tl.reshape(tl.load(x_ptr + mi * K + offs_k, mask=x_ok, other=0.0).to(tl.float32), [KB, 128])
        x_s = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10) / 448.0
        q = tl.clamp(x / x_s[:, None], -448.0, 448.0).to(tl.float8e4nv).to(tl.float32)
        xd = tl.reshape(q * (x_s * w_s)[:, None], [BLOCK_K])
    else:
        x = tl.load(x_ptr + mi * K + offs_k, mask=x_ok, other=0.0).to(tl.float32)
        xd = tl.reshape(tl.reshape(x, [KB, 128]) * w_s[:, None], [BLOCK_K])
    return xd


@triton.jit
def _gemv_kernel(x_ptr, xs_ptr, w_ptr, ws_ptr, c_ptr, acc_ptr, cnt_ptr, N, K, k_per_split,
                 M: tl.constexpr, MP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                 ACT: tl.constexpr, DOT: tl.constexpr, ACC2D: tl.constexpr, REDUCE: tl.constexpr,
                 EVEN: tl.constexpr, FENCE: tl.constexpr):
    KB: tl.constexpr = BLOCK_K // 128
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    groups = tl.cdiv(K, 128)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = tl.arange(0, MP)
    offs_j = tl.arange(0, KB)
    m_ok = offs_m < M
    s_row = ws_ptr + ((pid_n * BLOCK_N) // 128) * groups  # BLOCK_N divides 128: one weight-scale row a tile
    k_lo = pid_k * k_per_split
    k_hi = k_lo + k_per_split
    if k_hi > K:
        k_hi = K
    acc = tl.zeros([BLOCK_N, MP], dtype=tl.float32)  # DOT: the tensor cores' [BLOCK_N, 16]
    acc_2d = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)  # ACC2D (one token): summed over K once, at the end
    acc0 = tl.zeros([BLOCK_N], dtype=tl.float32)  # CUDA cores: one accumulator a token
    acc1 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc2 = tl.zeros([BLOCK_N], dtype=tl.float32)
    acc3 = tl.zeros([BLOCK_N], dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        g0 = k0 // 128
        if EVEN:
            w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :])
            w_s = tl.load(s_row + g0 + offs_j)
        else:
            w = tl.load(w_ptr + offs_n[:, None] * K + offs_k[None, :], mask=(offs_k < k_hi)[None, :], other=0.0)
            w_s = tl.load(s_row + g0 + offs_j, mask=(g0 + offs_j) < groups, other=0.0)
        if DOT:  # KB == 1: one weight scale and one activation scale a token per step
            x_ok = m_ok[:, None] & (offs_k < k_hi)[None, :]
            xp = x_ptr + offs_m[:, None] * K + offs_k[None, :]
            if ACT == 0:
                q = tl.load(xp, mask=x_ok, other=0.0)
                x_s = tl.load(xs_ptr + offs_m * groups + g0, mask=m_ok, other=0.0)
                part = tl.dot(w, tl.trans(q))
                acc += part * (x_s * tl.sum(w_s))[None, :]
            elif ACT == 1:
                x = tl.load(xp, mask=x_ok, other=0.0).to(tl.float32)
                x_s = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10) / 448.0
                q = tl.clamp(x / x_s[:, None], -448.0, 448.0).to(tl.float8e4nv)
                part = tl.dot(w, tl.trans(q))
                acc += part * (x_s * tl.sum(w_s))[None, :]
            else:  # weight-only: fp8 -> fp16 (exact) times the activation in fp16
                x = tl.load(xp, mask=x_ok, other=0.0).to(tl.float16)
                part = tl.dot(w.to(tl.float16), tl.trans(x))
                acc += part * tl.sum(w_s)
        elif ACC2D:
            xd = _row(x_ptr, xs_ptr, 0, K, groups, offs_k, k_hi, g0, offs_j, w_s, ACT, KB, BLOCK_K)
            acc_2d += w.to(tl.float32) * xd[None, :]
        else:
            wf = w.to(tl.float32)
            xd = _row(x_ptr, xs_ptr, 0, K, groups, offs_k, k_hi, g0, offs_j, w_s, ACT, KB, BLOCK_K)
            acc0 += tl.sum(wf * xd[None, :], axis=1)
            if M > 1:
                xd = _row(x_ptr, xs_ptr, 1, K, groups, offs_k, k_hi, g0, offs_j, w_s, ACT, KB, BLOCK_K)
                acc1 += tl.sum(wf * xd[None, :], axis=1)
            if M > 2:
                xd = _row(x_ptr, xs_ptr, 2, K, groups, offs_k, k_hi, g0, offs_j, w_s, ACT, KB, BLOCK_K)
                acc2 += tl.sum(wf * xd[None, :], axis=1)
            if M > 3:
                xd = _row(x_ptr, xs_ptr, 3, K, groups, offs_k, k_hi, g0, offs_j, w_s, ACT, KB, BLOCK_K)
                acc3 += tl.sum(wf * xd[None, :], axis=1)
    if DOT:
        out = tl.trans(acc)
    elif ACC2D:
        out = tl.where(offs_m[:, None] == 0, tl.sum(acc_2d, axis=1)[None, :], 0.0)
    else:
        out = tl.where(offs_m[:, None] == 0, acc0[None, :], 0.0)
        if M > 1:
            out += tl.where(offs_m[:, None] == 1, acc1[None, :], 0.0)
        if M > 2:
            out += tl.where(offs_m[:, None] == 2, acc2[None, :], 0.0)
        if M > 3:
            out += tl.where(offs_m[:, None] == 3, acc3[None, :], 0.0)
    c_off = offs_m[:, None] * N + offs_n[None, :]
    c_ok = m_ok[:, None] & (offs_n < N)[None, :]
    if REDUCE == 0:
        tl.store(c_ptr + c_off, out.to(tl.bfloat16), mask=c_ok)
    elif REDUCE == 1:
        tl.atomic_add(acc_ptr + c_off, out, mask=c_ok, sem="relaxed")
    elif REDUCE == 2:
        tl.store(acc_ptr + pid_k * (M * N) + c_off, out, mask=c_ok)
    else:
        tl.atomic_add(acc_ptr + c_off, out, mask=c_ok, sem="relaxed")
        if FENCE:
            _fence(c_off)
        tl.debug_barrier()
        done = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
        if done == tl.num_programs(1) - 1:
            bits = tl.atomic_xchg(acc_ptr.to(tl.pointer_type(tl.int32)) + c_off, tl.zeros_like(c_off), mask=c_ok,
                                  sem="acquire")
            total = bits.to(tl.float32, bitcast=True)
            tl.store(c_ptr + c_off, total.to(tl.bfloat16), mask=c_ok)
            tl.atomic_xchg(cnt_ptr + pid_n, 0, sem="relaxed")


@triton.jit
def _finish_kernel(acc_ptr, c_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    v = tl.load(acc_ptr + offs, mask=ok, other=0.0)
    tl.store(c_ptr + offs, v.to(tl.bfloat16), mask=ok)
    tl.store(acc_ptr + offs, tl.zeros_like(v), mask=ok)


@triton.jit
def _sum_kernel(part_ptr, c_ptr, total, split_k, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(split_k):
        s += tl.load(part_ptr + i * total + offs, mask=ok, other=0.0)
    tl.store(c_ptr + offs, s.to(tl.bfloat16), mask=ok)


@triton.jit
def _quant_kernel(x_ptr, q_ptr, s_ptr, K, G: tl.constexpr):
    # G groups of 128 columns of one token: vLLM's per_token_group_fp8_quant rule
    row = tl.program_id(0)
    offs_g = tl.program_id(1) * G + tl.arange(0, G)
    groups = tl.cdiv(K, 128)
    g_ok = offs_g < groups
    offs = offs_g[:, None] * 128 + tl.arange(0, 128)[None, :]
    x = tl.load(x_ptr + row * K + offs, mask=g_ok[:, None], other=0.0).to(tl.float32)
    s = tl.maximum(tl.max(tl.abs(x), axis=1), 1e-10) / 448.0
    tl.store(q_ptr + row * K + offs, tl.clamp(x / s[:, None], -448.0, 448.0).to(tl.float8e4nv), mask=g_ok[:, None])
    tl.store(s_ptr + row * groups + offs_g, s, mask=g_ok)


# ------------------------------------------------------------------------------------------------------------- host
def left():
    return BUDGET_S - (time.time() - T0)


def save():
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "splitk-bench.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULT, f, indent=1)
    os.replace(path + ".tmp", path)


def log(*args):
    print("[%6.1f s]" % (time.time() - T0), *args, flush=True)


def smi():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.mem,power.draw,"
                               "temperature.gpu,memory.used", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=20, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return repr(e)


def quantise_ref(x):
    """vLLM's per_token_group_fp8_quant in torch: fp8 [M, K] and float32 scales [M, K/128]."""
    m, k = x.shape
    g = x.float().reshape(m, -1, GROUP)
    s = g.abs().amax(dim=2).clamp(min=1e-10) / FP8_MAX
    q = (g / s[:, :, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return q.reshape(m, k), s.contiguous()


def dequantised(w, s):
    n, k = w.shape
    return w.float() * s.repeat_interleave(GROUP, 0)[:n].repeat_interleave(GROUP, 1)[:, :k]


def fp8_weight(n, k, dev):
    w = (torch.randn(n, k, device=dev, dtype=torch.float32) * 0.5).to(torch.bfloat16).to(torch.float8_e4m3fn)
    s = torch.rand(math.ceil(n / GROUP), math.ceil(k / GROUP), device=dev, dtype=torch.float32) * 2e-3 + 1e-3
    return w, s


class Shape:
    """One linear: its weight copies, activations, references, outputs and workspaces at M tokens."""

    def __init__(self, name, n, k, calls, m, weights=None):
        self.name, self.n, self.k, self.calls, self.m = name, n, k, calls, m
        self.w, self.s = weights if weights is not None else fp8_weight(n, k, DEV)
        self.layers = [(self.w, self.s)] + [(self.w.clone(), self.s.clone()) for _i in range(calls - 1)]
        self.set_tokens(m)

    def set_tokens(self, m):
        self.m = m
        gen = torch.Generator(device="cpu").manual_seed(1000 + m)
        self.x = torch.randn(m, self.k, generator=gen).to(torch.bfloat16).to(DEV)
        self.xq, self.xs = quantise_ref(self.x)
        wd = dequantised(self.w, self.s)
        self.ref = {"q": (self.xq.float() * self.xs.repeat_interleave(GROUP, 1)[:, :self.k]) @ wd.T,
                    "wo": self.x.float() @ wd.T}
        self.ref["fp8"] = self.ref["q"]
        self.wd = wd if INTERPRET else None
        self.outs = [torch.empty(m, self.n, device=DEV, dtype=torch.bfloat16) for _i in range(self.calls)]
        self.acc = torch.zeros(4 * self.n, device=DEV, dtype=torch.float32)
        self.cnt = torch.zeros(triton.cdiv(self.n, 16), device=DEV, dtype=torch.int32)
        self.parts = torch.empty(64 * 4 * self.n, device=DEV, dtype=torch.float32)
        self.q_buf = torch.empty(m, self.k, device=DEV, dtype=torch.float8_e4m3fn)
        self.s_buf = torch.empty(m, triton.cdiv(self.k, GROUP), device=DEV, dtype=torch.float32)

    def rel_error(self, act):
        """The worst of the step's calls: ||out - ref|| / ||ref||."""
        ref = self.ref[act]
        outs = torch.stack(self.outs).float()
        return float(((outs - ref[None]).flatten(1).norm(dim=1) / ref.norm()).max())


def split_plan(k, block_k, split_k):
    """k_per_split (a multiple of BLOCK_K) and the splits that hold work."""
    blocks = triton.cdiv(k, block_k)
    per = triton.cdiv(blocks, split_k)
    return per * block_k, triton.cdiv(blocks, per)


def acc_2d(cfg, m):
    """One token on the CUDA cores with at most 64 weight elements a thread: sum over K once, at the end."""
    return m == 1 and not cfg["dot"] and cfg["block_n"] * cfg["block_k"] <= 64 * 32 * cfg["warps"]


def launch(cfg, sh, i):
    """One call of the linear for layer copy i: cfg holds act, dot, block_n, block_k, split_k, warps, stages, reduce."""
    w, s = sh.layers[i]
    out = sh.outs[i]
    m, n, k = sh.m, sh.n, sh.k
    act = ACTS[cfg["act"]]
    per, splits = split_plan(k, cfg["block_k"], cfg["split_k"])
    reduce = REDUCES[cfg["reduce"]] if splits > 1 else 0
    x, xs = sh.x, sh.x
    if act == 0 and cfg.get("prequantised"):  # quantised beforehand (torch): the GEMV alone
        x, xs = sh.xq, sh.xs
    elif act == 0:
        g = 8
        _quant_kernel[(m, triton.cdiv(triton.cdiv(k, GROUP), g))](sh.x, sh.q_buf, sh.s_buf, k, G=g, num_warps=4)
        x, xs = sh.q_buf, sh.s_buf
    mp = 16 if cfg["dot"] else triton.next_power_of_2(m)
    even = (k % cfg["block_k"] == 0) and (n % cfg["block_n"] == 0)
    acc = sh.parts if reduce == 2 else sh.acc
    _gemv_kernel[(triton.cdiv(n, cfg["block_n"]), splits)](
        x, xs, w, s, out, acc, sh.cnt, n, k, per, M=m, MP=mp, BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        ACT=act, DOT=cfg["dot"], ACC2D=acc_2d(cfg, m), REDUCE=reduce, EVEN=even, FENCE=not INTERPRET,
        num_warps=cfg["warps"], num_stages=cfg["stages"])
    if reduce == 1:
        _finish_kernel[(triton.cdiv(m * n, 1024),)](sh.acc, out, m * n, BLOCK=1024, num_warps=4)
    elif reduce == 2:
        _sum_kernel[(triton.cdiv(m * n, 1024),)](sh.parts, out, m * n, splits, BLOCK=1024, num_warps=4)


def time_calls(calls, replays, repeats):
    """Microseconds a call: the calls captured in one CUDA graph, replayed `replays` times, `repeats` times."""
    for call in calls[:2]:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    for _rep in range(2):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _rep in range(repeats):
        start.record()
        for _inner in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1e3 / (replays * len(calls)))
    del graph
    runs.sort()
    return {"median": runs[len(runs) // 2], "min": runs[0], "max": runs[-1], "runs": runs}


def key(cfg):
    return json.dumps(cfg, sort_keys=True)


def measure(cfg, sh, full, kind="gemv"):
    """Time one config on one shape (all its layer copies), then check every copy's output."""
    for o in sh.outs:
        o.fill_(float("nan"))
    calls = [lambda i=i: launch(cfg, sh, i) for i in range(sh.calls)]
    if kind == "quant":
        g = 8
        grid = (sh.m, triton.cdiv(triton.cdiv(sh.k, GROUP), g))
        calls = [lambda: _quant_kernel[grid](sh.x, sh.q_buf, sh.s_buf, sh.k, G=g, num_warps=4)] * sh.calls
    timing = time_calls(calls, REPLAYS if full else SCREEN_REPLAYS, REPEATS if full else 1)
    torch.cuda.synchronize()
    entry = {"shape": sh.name, "tokens": sh.m, "config": cfg, "us": timing}
    if kind == "quant":
        entry["kind"] = "quant"
        entry["rel_error"] = float((sh.q_buf.float() * sh.s_buf.repeat_interleave(GROUP, 1)[:, :sh.k] -
                                    sh.xq.float() * sh.xs.repeat_interleave(GROUP, 1)[:, :sh.k]).norm()
                                   / (sh.xq.float() * sh.xs.repeat_interleave(GROUP, 1)[:, :sh.k]).norm())
    else:
        entry["rel_error"] = sh.rel_error(cfg["act"])
        nbytes = sh.n * sh.k
        floor_us = nbytes / (RESULT["copy_gb_s"]["median"] * 1e3)
        entry["floor_us"] = floor_us
        entry["of_floor"] = floor_us / timing["median"]
        entry["splits"] = split_plan(sh.k, cfg["block_k"], cfg["split_k"])[1]
        entry["programs"] = triton.cdiv(sh.n, cfg["block_n"]) * entry["splits"]
    (RESULT["points"] if full else RESULT["screen"]).append(entry)
    return entry


def show(e):
    c = e["config"]
    served = SERVED_US_M1.get(e["shape"]) if e["tokens"] == 1 else None
    log("%-5s %-14s M=%d %8.2f us [%.2f, %.2f] err %.4f %s %s" % (
        "full" if e in RESULT["points"] else "scr", e["shape"], e["tokens"], e["us"]["median"], e["us"]["min"],
        e["us"]["max"], e["rel_error"], "%.0f%% floor" % (100 * e.get("of_floor", 0)) +
        (" served %.2f" % served if served else ""), key(c)))


# ---------------------------------------------------------------------------------------------------------- the grid
def tile_grid():
    """(act, dot, block_n, block_k, warps, stages): the compiled variants of the screen, in the screen's order.

    CUDA cores: 32-128 weight bytes a thread a step, one stage (Triton pipelines only the loads that feed tl.dot:
    with 3 stages the PTX held no cp.async, compiled here for sm_90a). Tensor cores: BLOCK_K 128 (one scale a step),
    BLOCK_N 64 or 128, 3 or 6 stages of cp.async."""
    tiles = []
    for act in ("wo", "q"):
        for warps in (4, 8):
            for bn in (16, 32, 64, 128):
                for bk in (128, 256, 512):
                    if 1024 * warps <= bn * bk <= 4096 * warps:
                        tiles.append({"act": act, "dot": False, "block_n": bn, "block_k": bk, "warps": warps,
                                      "stages": 1})
    for act in ("q", "wo"):
        for bn, warps in ((64, 4), (128, 4), (128, 8)):
            for stages in (3, 6):
                tiles.append({"act": act, "dot": True, "block_n": bn, "block_k": 128, "warps": warps,
                              "stages": stages})
    kinds = {}
    for t in tiles:
        kinds.setdefault((t["act"], t["dot"]), []).append(t)
    order = []  # round robin over the four kinds, so that a screen cut short by the budget has tried each
    for i in range(max(len(v) for v in kinds.values())):
        order += [v[i] for v in kinds.values() if i < len(v)]
    return order


def split_candidates(sh, bn, bk, sms):
    """SPLIT_K values whose grids come nearest 1, 2 and 4 programs an SM (no empty split)."""
    tiles = triton.cdiv(sh.n, bn)
    blocks = triton.cdiv(sh.k, bk)
    seen = {}
    for s in range(1, blocks + 1):
        _per, splits = split_plan(sh.k, bk, s)
        seen.setdefault(splits, tiles * splits)
    chosen = []
    for target in (sms, 2 * sms, 4 * sms):
        best = min(seen, key=lambda s: abs(math.log(seen[s] / target)))
        if best not in chosen:
            chosen.append(best)
    return sorted(chosen)


def screen(shapes, tiles, sms, until):
    for tile in tiles:
        for sh in shapes:
            if sh.name == "shared_down" and tile["block_k"] != 128:
                continue
            for split_k in split_candidates(sh, tile["block_n"], tile["block_k"], sms):
                if left() < until:
                    RESULT["skipped"].append("screen %s %s s%d: budget" % (sh.name, key(tile), split_k))
                    continue
                cfg = dict(tile, split_k=split_k, reduce="direct" if split_k == 1 else "counter")
                try:
                    show(measure(cfg, sh, full=False))
                except Exception as e:
                    RESULT["errors"].append("screen %s %s: %r" % (sh.name, key(cfg), e))
                    log("error", RESULT["errors"][-1][:300])
        save()


def best_points(pool, shape, tokens, count, good=lambda e: True):
    found = [e for e in pool if e["shape"] == shape and e["tokens"] == tokens and e.get("kind") != "quant"
             and e["rel_error"] < MAX_REL_ERROR and good(e)]
    found.sort(key=lambda e: e["us"]["median"])
    out, seen = [], set()
    for e in found:
        if key(e["config"]) not in seen:
            seen.add(key(e["config"]))
            out.append(e)
        if len(out) == count:
            break
    return out


def full(cfg, sh, kind="gemv"):
    try:
        e = measure(cfg, sh, full=True, kind=kind)
        if kind != "quant":
            show(e)
        else:
            t = e["us"]
            log("full  %-14s M=%d quant %.2f us [%.2f, %.2f]" % (sh.name, sh.m, t["median"], t["min"], t["max"]))
        save()
        return e
    except Exception as exc:
        RESULT["errors"].append("full %s %s: %r" % (sh.name, key(cfg), exc))
        log("error", RESULT["errors"][-1][:300])
        save()
        return None


KINDS = {  # what a vLLM patch could use: W8A8 (the served numbers) or weight-only FP8
    "w8a8": lambda e: e["config"]["act"] in ("q", "fp8") and not e["config"].get("prequantised"),
    "weight_only": lambda e: e["config"]["act"] == "wo",
}


def summary():
    """Per kind and token count: each shape's best fully timed point, the step's total, against the served kernel."""
    rows = {}
    served_ms = sum(SERVED_US_M1[s] * SHAPES[s][2] for s in SHAPES) / 1e3 + SERVED_QUANT_MS_M1
    for kind, good in KINDS.items():
        for tokens in (1, 4):
            row = {"kind": kind, "tokens": tokens, "shapes": {}}
            total_ms, complete = 0.0, True
            for name, (_n, _k, calls) in SHAPES.items():
                best = best_points(RESULT["points"], name, tokens, 1, good)
                if not best:
                    complete = False
                    continue
                e = best[0]
                us = e["us"]["median"]
                item = {"config": e["config"], "us": e["us"], "rel_error": e["rel_error"], "of_floor": e["of_floor"],
                        "floor_us": e["floor_us"], "programs": e["programs"]}
                if tokens == 1:
                    served = SERVED_US_M1[name] + SERVED_QUANT_MS_M1 * 1e3 / 182
                    item["served_us_with_quant"] = served
                    item["delta_ms_a_step"] = (us - served) * calls / 1e3
                row["shapes"][name] = item
                total_ms += us * calls / 1e3
            row["ms_a_step"] = total_ms if complete else None
            if tokens == 1 and complete:
                row["served_ms_a_step"] = served_ms
                row["delta_ms"] = total_ms - served_ms
                row["projected_tok_s"] = STEP_TOK_S * STEP_MS / (STEP_MS + row["delta_ms"])
            rows["%s_m%d" % (kind, tokens)] = row
    RESULT["summary"] = rows
    save()
    log("summary", json.dumps(rows, indent=1))


def copy_bandwidth():
    a = torch.empty(2 << 30, dtype=torch.uint8, device=DEV)
    b = torch.empty_like(a)
    for _rep in range(3):
        b.copy_(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _rep in range(5):
        start.record()
        for _inner in range(5):
            b.copy_(a)
        end.record()
        torch.cuda.synchronize()
        runs.append(2 * a.numel() * 5 / (start.elapsed_time(end) / 1e3) / 1e9)
    del a, b
    torch.cuda.empty_cache()
    runs.sort()
    return {"median": runs[len(runs) // 2], "min": runs[0], "max": runs[-1]}


def self_check():
    """CPU, Triton's interpreter: small shapes (one odd K), every activation mode, product and reduction.

    The interpreter's float32 -> fp8 conversion does not round as the GPU does (124.99 -> 64 where round to nearest
    gives 128, ties not to even), so here ACT fp8 takes the torch-quantised activation and ACT q is checked against
    the activation as the interpreter's own _quant_kernel quantises it (the same conversion as inside the GEMV)."""
    failures = 0
    for n, k in ((256, 1408), (256, 1024)):
        weights = fp8_weight(n, k, DEV)
        for m in (1, 3, 4):
            sh = Shape("check", n, k, 1, m, weights)
            groups = triton.cdiv(k, GROUP)
            _quant_kernel[(m, triton.cdiv(groups, 8))](sh.x, sh.q_buf, sh.s_buf, k, G=8)
            differ = int((sh.q_buf.float() != sh.xq.float()).sum())
            print("n %d k %d m %d: interpreter's fp8 rounding differs from torch's in %d of %d activations" % (
                n, k, m, differ, m * k))
            sh.ref["q"] = (sh.q_buf.float() * sh.s_buf.repeat_interleave(GROUP, 1)[:, :k]) @ sh.wd.T
            for act, dot in (("wo", False), ("q", False), ("fp8", False), ("q", True), ("fp8", True), ("wo", True)):
                for bn, bk, split_k, reduce in ((64, 128, 1, "direct"), (32, 256, 3, "counter"),
                                                (128, 128, 4, "atomic"), (64, 512, 2, "partials"),
                                                (128, 128, 11, "counter")):
                    if dot and bk != 128:
                        continue
                    cfg = {"act": act, "dot": dot, "block_n": bn, "block_k": bk, "warps": 4, "stages": 1,
                           "split_k": split_k, "reduce": reduce, "prequantised": True}
                    sh.outs[0].fill_(float("nan"))
                    launch(cfg, sh, 0)
                    err = sh.rel_error(act)
                    left_over = float(sh.acc.abs().sum()) + float(sh.cnt.abs().sum())
                    ok = err < 0.01 and left_over == 0.0
                    failures += not ok
                    print("n %d k %d m %d %-4s dot %d bn %3d bk %3d split %2d %-8s rel_error %.5f workspace %g %s" % (
                        n, k, m, act, int(dot), bn, bk, split_k, reduce, err, left_over, "ok" if ok else "FAIL"),
                        flush=True)
    print("failures:", failures)
    return failures


def main():
    if CHECK:
        sys.exit(1 if self_check() else 0)
    os.makedirs(OUT, exist_ok=True)
    RESULT["gpu_before"] = smi()
    RESULT["torch"], RESULT["triton"] = torch.__version__, triton.__version__
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    RESULT["device"] = {"name": props.name, "sms": sms, "cuda": torch.version.cuda}
    log("GPU:", RESULT["gpu_before"], "| torch", torch.__version__, "triton", triton.__version__, "SMs", sms)
    RESULT["copy_gb_s"] = copy_bandwidth()
    log("copy GB/s:", RESULT["copy_gb_s"])
    save()
    shapes = [Shape(name, n, k, calls, 1) for name, (n, k, calls) in SHAPES.items()]
    log("weights ready: %.1f GiB allocated" % (torch.cuda.memory_allocated() / 2 ** 30))
    tiles = tile_grid()
    RESULT["tiles"] = tiles
    # 1. the screen at one token, until 30 % of the budget is left
    screen(shapes, tiles, sms, until=0.3 * BUDGET_S)
    # 2. full timing at one token: the 3 best screened points a shape, and the best of each product/activation kind
    for sh in shapes:
        picks = best_points(RESULT["screen"], sh.name, 1, 3)
        for act, dot in (("wo", False), ("q", False), ("q", True), ("wo", True)):
            picks += best_points(RESULT["screen"], sh.name, 1, 1,
                                 lambda e, act=act, dot=dot: e["config"]["act"] == act and e["config"]["dot"] == dot)
        done = set()
        for e in picks:
            if key(e["config"]) in done or left() < 0.2 * BUDGET_S:
                continue
            done.add(key(e["config"]))
            full(e["config"], sh)
    summary()
    # 3. on each shape's best W8A8 point (act q) that splits K: the two-kernel reductions, and the activation
    # quantised beforehand by a separate kernel (timed together, the GEMV alone, the quantisation alone)
    for sh in shapes:
        for best in best_points(RESULT["points"], sh.name, 1, 1,
                                lambda e: e["config"]["act"] == "q" and e["splits"] > 1):
            for reduce in ("atomic", "partials"):
                if left() > 0.12 * BUDGET_S:
                    full(dict(best["config"], reduce=reduce), sh)
            if left() > 0.12 * BUDGET_S:
                full(dict(best["config"], act="fp8"), sh)
                full(dict(best["config"], act="fp8", prequantised=True), sh)
                full({"act": "fp8"}, sh, kind="quant")
    summary()
    # 4. four tokens: each shape's best W8A8 and best weight-only config at one token, re-screened over SPLIT_K
    for sh in shapes:
        sh.set_tokens(4)
    for sh in shapes:
        tried = []
        for good in KINDS.values():
            for best in best_points(RESULT["points"], sh.name, 1, 1, good):
                base = {k_: v for k_, v in best["config"].items() if k_ not in ("split_k", "reduce")}
                for split_k in split_candidates(sh, base["block_n"], base["block_k"], sms):
                    if left() < 0.06 * BUDGET_S:
                        RESULT["skipped"].append("M=4 %s %s s%d: budget" % (sh.name, key(base), split_k))
                        continue
                    cfg = dict(base, split_k=split_k, reduce="direct" if split_k == 1 else "counter")
                    try:
                        e = measure(cfg, sh, full=False)
                        show(e)
                        tried.append(e)
                    except Exception as exc:
                        RESULT["errors"].append("M=4 %s %s: %r" % (sh.name, key(cfg), exc))
                        log("error", RESULT["errors"][-1][:300])
        for good in KINDS.values():
            for e in best_points(tried, sh.name, 4, 1, good):
                if left() > 0.02 * BUDGET_S:
                    full(e["config"], sh)
        save()
    RESULT["gpu_after"] = smi()
    RESULT["wall_s"] = time.time() - T0
    summary()
    log("done in %.1f s" % RESULT["wall_s"])


if __name__ == "__main__":
    main()
