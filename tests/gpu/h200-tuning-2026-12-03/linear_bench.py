"""Issue 37 item 2 without a vLLM server: the block-FP8 linears of the full GLM-4.6V-FP8 text shape, one kernel at a
time, on one GPU, for the linear backends vLLM 0.26.0 can be told to use instead of its default on Hopper
(FlashInferFp8DeepGEMMDynamicBlockScaledKernel: flashinfer's DeepGEMM swap-AB below 32 tokens, DeepGEMM from 32):

  marlin  `--linear-backend marlin` with VLLM_TEST_FORCE_FP8_MARLIN=1: MarlinFP8ScaledMMLinearKernel, weight-only
          FP8 (bf16 activations, no activation quantisation), vLLM's _C marlin_gemm with the weights repacked by
          its gptq_marlin_repack and the block scales expanded and permuted as prepare_fp8_layer_for_marlin does;
  triton  `--linear-backend triton`: TritonFp8BlockScaledMMKernel, vLLM's _w8a8_triton_block_scaled_mm (its source
          is read from the carried fp8_utils.py) with its default config (what vLLM runs where no tuned file
          N=..,K=..,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json exists) and a small sweep of
          the configs vLLM's tuner searches; plus the activation quantisation every W8A8 path but flashinfer's pays
          (vLLM's _C per_token_group_fp8_quant, group 128).

Each (kernel, shape, tokens) point: LAYERS copies of the weight (46 for the attention projections, 45 for the shared
expert: layer 0 is dense), so the weights stream from HBM as in a decode step, one call per copy captured in one CUDA
graph, replayed REPLAYS times between CUDA events, REPEATS times: microseconds a call, median [min, max], and the
bytes the call must read (weights + scales) over that time against the copy bandwidth measured first. One call of
each kernel is checked against a float32 reference of the same dequantised weights.

    python3 linear_bench.py OUTDIR FP8_UTILS_PY C_SO [BUDGET_S=150]

FP8_UTILS_PY: vLLM 0.26.0's vllm/model_executor/layers/quantization/utils/fp8_utils.py; C_SO: its
vllm/_C_stable_libtorch.abi3.so (only torch and triton are imported; vLLM itself is not). Writes OUTDIR/linear-bench.json
after every point (a run stopped at BUDGET_S keeps what it measured). No GPU setting is changed.
"""
import ast
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import torch

OUT, FP8_UTILS, C_SO = sys.argv[1], sys.argv[2], sys.argv[3]
BUDGET_S = float(sys.argv[4]) if len(sys.argv) > 4 else 150.0
T0 = time.time()
REPLAYS = int(os.environ.get("REPLAYS", "20"))
REPEATS = int(os.environ.get("REPEATS", "5"))
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,16,40").split(",")]
# name: (N, K, calls a decode step): GLM-4.6V's text model (hidden 4096, 96 query heads and 8 KV heads of 128,
# shared expert intermediate 1408), 46 layers of which 45 are MoE layers with a shared expert
SHAPES = {
    "qkv_proj": (14336, 4096, 46),
    "o_proj": (4096, 12288, 46),
    "shared_gate_up": (2816, 4096, 45),
    "shared_down": (4096, 1408, 45),
}
# 2026-12-02 (h200-engine-as-served-2026-12-02/profile-eager-analysed.json, greedy window, one request): vLLM's
# default kernel at one token, microseconds a call (ms a step / calls a step), and its activation quantisation
# (scale_1x128, 182 calls a step: 0.2916 ms)
SERVED_US_M1 = {"qkv_proj": 759.6 / 46, "o_proj": 807.5 / 46, "shared_gate_up": 326.9 / 45, "shared_down": 209.7 / 45}
SERVED_QUANT_MS_M1 = 0.2916
# vLLM 0.26.0's scalar_types.float8_e4m3fn.id (vllm/scalar_type.py: ScalarType.float_(4, 3, True, EXTD_RANGE_MAX_MIN))
FP8_E4M3FN_ID = 2814749767172868
GROUP = 128
DEV = "cuda"
RESULT = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "budget_s": BUDGET_S, "replays": REPLAYS,
          "repeats": REPEATS, "tokens": TOKENS, "shapes": {k: {"N": v[0], "K": v[1], "calls_a_step": v[2]}
                                                           for k, v in SHAPES.items()},
          "served_us_m1": SERVED_US_M1, "points": [], "skipped": [], "errors": []}


def left():
    return BUDGET_S - (time.time() - T0)


def save():
    path = os.path.join(OUT, "linear-bench.json")
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


def load_c_ops():
    """vLLM's _C ops into torch.ops._C, without importing vLLM."""
    try:
        torch.ops.load_library(C_SO)
    except (OSError, RuntimeError) as e:
        log("load_library failed, loading as an extension module:", e)
        loader = importlib.machinery.ExtensionFileLoader("_C_stable_libtorch", C_SO)
        spec = importlib.util.spec_from_file_location("_C_stable_libtorch", C_SO, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    names = ("marlin_gemm", "gptq_marlin_repack", "per_token_group_fp8_quant")
    return {name: hasattr(torch.ops._C, name) for name in names}


def load_triton_kernel():
    """vLLM's _w8a8_triton_block_scaled_mm, its source as fp8_utils.py holds it, in a module of its own."""
    with open(FP8_UTILS) as f:
        source = f.read()
    lines = source.splitlines()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "_w8a8_triton_block_scaled_mm":
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            text = "\n".join(lines[first - 1:node.end_lineno])
            break
    else:
        raise RuntimeError("_w8a8_triton_block_scaled_mm not in " + FP8_UTILS)
    folder = tempfile.mkdtemp(prefix="vllm-w8a8-")
    path = os.path.join(folder, "vllm_w8a8_block_kernel.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n\n\n" + text + "\n")
    spec = importlib.util.spec_from_file_location("vllm_w8a8_block_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._w8a8_triton_block_scaled_mm


def copy_bandwidth():
    """GB/s of a device-to-device copy of 2 GiB (bytes read + written), the reference of issue 37's bound."""
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


def time_calls(calls):
    """Microseconds a call: the calls captured in one CUDA graph, replayed REPLAYS times, REPEATS times."""
    for call in calls[:2]:
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    for _rep in range(3):
        graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _rep in range(REPEATS):
        start.record()
        for _inner in range(REPLAYS):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1e3 / (REPLAYS * len(calls)))
    del graph
    runs.sort()
    return {"median": runs[len(runs) // 2], "min": runs[0], "max": runs[-1], "runs": runs}


def fp8_weight(n, k):
    """A random FP8 weight (N, K) and its block scales (N/128, K/128), float32, as a checkpoint holds them."""
    w = (torch.randn(n, k, device=DEV, dtype=torch.bfloat16) * 0.5).to(torch.float8_e4m3fn)
    s = torch.rand(n // GROUP, k // GROUP, device=DEV, dtype=torch.float32) * 2e-3 + 1e-3
    return w, s


def dequantised(w, s):
    return w.float() * s.repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)


def marlin_scale_perm():
    perm = []
    for i in range(8):
        perm.extend([i + 8 * j for j in range(8)])
    return perm


def marlin_layer(w, s):
    """prepare_fp8_layer_for_marlin for a block-quantised (N, K) weight: repacked weight, permuted bf16 scales."""
    n, k = w.shape
    qweight = w.view(torch.int32).T.contiguous()  # pack_fp8_to_int32(size_k_first=False), then .T: (K / 4, N)
    repacked = torch.ops._C.gptq_marlin_repack(qweight, torch.empty(0, dtype=torch.int, device=DEV), k, n, 8, False)
    scales = s.T.contiguous().to(torch.bfloat16).repeat_interleave(GROUP, 1)[:, :n]  # (K / 128, N)
    scales = scales.reshape(-1, 64)[:, marlin_scale_perm()].reshape(-1, n).contiguous()
    scales = scales * (2.0 ** 120)  # fp8_fused_exponent_bias_into_scales for bf16
    return repacked, scales


def marlin_call(a, repacked, scales, workspace, n, k):
    return torch.ops._C.marlin_gemm(a, None, repacked, None, scales, None, None, None, None, None, workspace,
                                    FP8_E4M3FN_ID, a.shape[0], n, k, True, False, True, False)


def quant_call(x, group=GROUP):
    q = torch.empty(x.shape, device=DEV, dtype=torch.float8_e4m3fn)
    scale = torch.empty((x.shape[0], x.shape[1] // group), device=DEV, dtype=torch.float32)
    torch.ops._C.per_token_group_fp8_quant(x, q, scale, group, 1e-10, -448.0, 448.0, False, False, False)
    return q, scale


def triton_call(kernel, config, a, a_scale, w, w_scale):
    m, n = a.shape[0], w.shape[0]
    c = torch.empty((m, n), device=DEV, dtype=torch.bfloat16)

    def grid(meta):
        blocks_m = (m + meta["BLOCK_SIZE_M"] - 1) // meta["BLOCK_SIZE_M"]
        return (blocks_m * ((n + meta["BLOCK_SIZE_N"] - 1) // meta["BLOCK_SIZE_N"]),)

    kernel[grid](a, w, c, a_scale, w_scale, m, n, a.shape[1], GROUP, GROUP, a.stride(-2), a.stride(-1), w.stride(1),
                 w.stride(0), c.stride(-2), c.stride(-1), a_scale.stride(-2), a_scale.stride(-1), w_scale.stride(1),
                 w_scale.stride(0), **config)
    return c


def rel_error(out, ref):
    return float((out.float() - ref).norm() / ref.norm())


def point(kind, shape, tokens, config, timing, extra=None, nbytes=None):
    n, k, _calls = SHAPES[shape]
    if nbytes is None:
        nbytes = n * k + (n // GROUP) * (k // GROUP) * 4
    entry = {"kernel": kind, "shape": shape, "tokens": tokens, "config": config, "us": timing,
             "gb_s": nbytes / (timing["median"] * 1e-6) / 1e9,
             "of_copy_bandwidth": nbytes / (timing["median"] * 1e-6) / 1e9 / RESULT["copy_gb_s"]["median"]}
    if extra:
        entry.update(extra)
    RESULT["points"].append(entry)
    save()
    log("%-7s %-15s M=%-3d %8.2f us [%.2f, %.2f] %5.1f %% of copy %s" % (
        kind, shape, tokens, timing["median"], timing["min"], timing["max"], 100 * entry["of_copy_bandwidth"],
        json.dumps(config) if config else ""))
    return entry


def run_marlin(shape, weights):
    n, k, calls = SHAPES[shape]
    w, s = weights
    repacked, scales = marlin_layer(w, s)
    layers = [(repacked.clone(), scales.clone(), torch.zeros(SMS, dtype=torch.int, device=DEV)) for _rep in range(calls)]
    del repacked, scales
    for tokens in TOKENS:
        if left() < 10:
            RESULT["skipped"].append("marlin %s M=%d: budget" % (shape, tokens))
            continue
        a = torch.randn(tokens, k, device=DEV, dtype=torch.bfloat16)
        ref = a.float() @ dequantised(w, s).T
        err = rel_error(marlin_call(a, layers[0][0], layers[0][1], layers[0][2], n, k), ref)
        timing = time_calls([lambda lay=lay, a=a: marlin_call(a, lay[0], lay[1], lay[2], n, k) for lay in layers])
        point("marlin", shape, tokens, None, timing, {"rel_error": err})
    del layers


def triton_configs(tokens):
    default = {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 32, "num_warps": 4,
               "num_stages": 2}
    block_m = 16 if tokens <= 16 else 64
    sweep = [{"BLOCK_SIZE_M": block_m, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": 4,
              "num_stages": st} for bn in (32, 64, 128) for st in (3, 4, 5)]
    if tokens > 1:  # at 16 and 40 tokens, the sweep's BLOCK_N x stages at one block of M rows only
        sweep = [c for c in sweep if c["num_stages"] == 4]
    return [("default", default)] + [("sweep", c) for c in sweep]


def triton_layers(shape, weights):
    w, s = weights
    return [(w.clone(), s.clone()) for _rep in range(SHAPES[shape][2])]


def run_triton(kernel, shape, weights, layers, tokens):
    """One shape at one token count: the activation quantisation, then each config of triton_configs."""
    _n, k, calls = SHAPES[shape]
    w, s = weights
    a = torch.randn(tokens, k, device=DEV, dtype=torch.bfloat16)
    aq, a_scale = quant_call(a)
    ref = (aq.float() * a_scale.repeat_interleave(GROUP, 1)) @ dequantised(w, s).T
    if left() > 10:
        timing = time_calls([lambda: quant_call(a)] * calls)
        point("quant", shape, tokens, {"group": GROUP, "K": k}, timing, nbytes=tokens * k * 3)
    for name, config in triton_configs(tokens):
        if left() < 10:
            RESULT["skipped"].append("triton %s M=%d %s: budget" % (shape, tokens, json.dumps(config)))
            continue
        try:
            err = rel_error(triton_call(kernel, config, aq, a_scale, layers[0][0], layers[0][1]), ref)
            timing = time_calls([lambda lay=lay, config=config: triton_call(kernel, config, aq, a_scale, lay[0], lay[1])
                                 for lay in layers])
            point("triton", shape, tokens, config, timing, {"rel_error": err, "config_kind": name})
        except Exception as e:
            RESULT["errors"].append("triton %s M=%d %s: %r" % (shape, tokens, json.dumps(config), e))
            log("error", RESULT["errors"][-1])
            save()


def run_bf16(shape, tokens=1):
    """Reference: the same product with a bf16 weight through torch (cuBLAS), twice the bytes."""
    n, k, calls = SHAPES[shape]
    layers = [torch.randn(n, k, device=DEV, dtype=torch.bfloat16) for _rep in range(calls)]
    a = torch.randn(tokens, k, device=DEV, dtype=torch.bfloat16)
    timing = time_calls([lambda lay=lay: torch.nn.functional.linear(a, lay) for lay in layers])
    point("bf16", shape, tokens, None, timing, nbytes=2 * n * k)
    del layers


def summary():
    """Per decode step at each token count: the best of each kernel over the four shapes, against the served one."""
    rows = {}
    for tokens in TOKENS:
        row = {}
        for kind in ("marlin", "triton", "triton_default", "quant"):
            total, complete = 0.0, True
            for shape, (_n, _k, calls) in SHAPES.items():
                found = [p["us"]["median"] for p in RESULT["points"] if p["shape"] == shape and p["tokens"] == tokens
                         and (p["kernel"] == kind or (kind == "triton_default" and p["kernel"] == "triton"
                                                      and p.get("config_kind") == "default"))]
                if found:
                    total += min(found) * calls / 1e3
                else:
                    complete = False
            row[kind + "_ms_a_step"] = total if complete else None
        if row["triton_ms_a_step"] is not None and row["quant_ms_a_step"] is not None:
            row["triton_with_quant_ms_a_step"] = row["triton_ms_a_step"] + row["quant_ms_a_step"]
        if tokens == 1:
            row["served_ms_a_step"] = sum(us * SHAPES[s][2] for s, us in SERVED_US_M1.items()) / 1e3
            row["served_with_quant_ms_a_step"] = row["served_ms_a_step"] + SERVED_QUANT_MS_M1
        rows[str(tokens)] = row
    RESULT["summary"] = rows
    save()
    log("summary", json.dumps(rows, indent=1))


os.makedirs(OUT, exist_ok=True)
RESULT["gpu_before"] = smi()
RESULT["torch"] = torch.__version__
log("GPU:", RESULT["gpu_before"], "torch", torch.__version__)
SMS = torch.cuda.get_device_properties(0).multi_processor_count
RESULT["sms"] = SMS
try:
    RESULT["c_ops"] = load_c_ops()
except Exception as exc:
    RESULT["errors"].append("vLLM _C: %r" % exc)
    RESULT["c_ops"] = {}
try:
    import triton
    RESULT["triton"] = triton.__version__
    KERNEL = load_triton_kernel()
except Exception as exc:
    RESULT["errors"].append("triton kernel: %r" % exc)
    KERNEL = None
log("vLLM _C ops:", RESULT["c_ops"], "triton", RESULT.get("triton"), "errors", RESULT["errors"])
RESULT["copy_gb_s"] = copy_bandwidth()
log("copy GB/s:", RESULT["copy_gb_s"])
save()
WEIGHTS = {shape: fp8_weight(n_, k_) for shape, (n_, k_, _calls) in SHAPES.items()}
if RESULT["c_ops"].get("marlin_gemm") and RESULT["c_ops"].get("gptq_marlin_repack"):
    for shape_name in SHAPES:
        try:
            run_marlin(shape_name, WEIGHTS[shape_name])
        except Exception as exc:
            RESULT["errors"].append("marlin %s: %r" % (shape_name, exc))
            log("error", RESULT["errors"][-1])
            save()
summary()
if KERNEL is not None and RESULT["c_ops"].get("per_token_group_fp8_quant"):
    LAYERS = {shape_name: triton_layers(shape_name, WEIGHTS[shape_name]) for shape_name in SHAPES}
    for tokens_ in TOKENS:  # one token first, over every shape: the goal's row
        for shape_name in SHAPES:
            if left() < 10:
                RESULT["skipped"].append("triton %s M=%d: budget" % (shape_name, tokens_))
                continue
            try:
                run_triton(KERNEL, shape_name, WEIGHTS[shape_name], LAYERS[shape_name], tokens_)
            except Exception as exc:
                RESULT["errors"].append("triton %s M=%d: %r" % (shape_name, tokens_, exc))
                log("error", RESULT["errors"][-1])
                save()
    del LAYERS
for shape_name in SHAPES:
    if left() < 10:
        RESULT["skipped"].append("bf16 %s: budget" % shape_name)
        continue
    try:
        run_bf16(shape_name)
    except Exception as exc:
        RESULT["errors"].append("bf16 %s: %r" % (shape_name, exc))
        save()
RESULT["gpu_after"] = smi()
RESULT["wall_s"] = time.time() - T0
summary()
log("done in %.1f s" % RESULT["wall_s"])
