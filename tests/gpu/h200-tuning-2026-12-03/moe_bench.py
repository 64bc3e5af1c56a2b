"""Issue 37 item 2 without a vLLM server: the routed experts of the full GLM-4.6V-FP8 text shape (E=128, hidden 4096,
intermediate 1408, top-8, FP8 block [128, 128]) through vLLM 0.26.0's Triton fused_moe_kernel (the MoE backend it
selects on Hopper, `Using default MoE config`), one MoE layer's two expert GEMMs (w13, then w2 with the router
weights) at a time, for the configs the kernel can be given:

  default  get_default_config(M, ...) for fp8_w8a8 block [128, 128] as vLLM 0.26.0 computes it on CUDA (the rule is
           restated here from fused_moe.py; what vLLM serves where no tuned file exists);
  tuned    the autotune stage's file of 2026-11-30 (../h200-tune-moe-2026-11-30/E=128,N=1408,...json), the entry vLLM
           picks for M (the nearest key, the first of a tie);
  sweep    BLOCK_SIZE_N x num_stages x num_warps at BLOCK_SIZE_M 16 (more at one token, the goal's row).

The launch is vLLM's invoke_fused_moe_triton_kernel restated: SWAP_AB on sm90 where BLOCK_SIZE_M < 64 <= BLOCK_SIZE_N,
the naive block assignment where tokens x top-k x 4 <= E (one to four tokens), else sorted token ids aligned to
BLOCK_SIZE_M per expert (moe_align_block_size, here in torch, outside the timed graph). The kernel's source is read
from the carried fused_moe.py. Each point: 45 MoE layers (a decode step's), each with its own random routing over
SETS weight sets, captured in one CUDA graph and replayed, REPLAYS x REPEATS: microseconds a layer (both GEMMs),
median [min, max], and the bytes of the experts the routings touch over that time against the copy bandwidth.
Activations are quantised once, outside the graph (vLLM quantises per layer; that kernel is not timed here).

    python3 moe_bench.py OUTDIR FUSED_MOE_PY [BUDGET_S=90]

Writes OUTDIR/moe-bench.json after every point. No GPU setting is changed.
"""
import ast
import importlib.util
import json
import os
import sys
import tempfile
import time

import torch
import triton
import triton.language as tl

OUT, FUSED_MOE = sys.argv[1], sys.argv[2]
BUDGET_S = float(sys.argv[3]) if len(sys.argv) > 3 else 90.0
T0 = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
TUNED_FILE = os.path.join(HERE, "..", "h200-tune-moe-2026-11-30",
                          "E=128,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json")
REPLAYS = int(os.environ.get("REPLAYS", "10"))
REPEATS = int(os.environ.get("REPEATS", "5"))
SETS = int(os.environ.get("SETS", "4"))
TOKENS = [int(t) for t in os.environ.get("TOKENS", "1,16,40").split(",")]
E, HIDDEN, INTER, TOPK, LAYERS, GROUP = 128, 4096, 1408, 8, 45, 128
# 2026-12-02's profile (greedy window, one request): fused_moe_kernel 1.7874 ms a step, 90 calls (2 a MoE layer)
SERVED_US_M1 = 1787.4 / 45
DEV = "cuda"
RESULT = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "budget_s": BUDGET_S, "replays": REPLAYS,
          "repeats": REPEATS, "sets": SETS, "tokens": TOKENS, "served_us_a_layer_m1": SERVED_US_M1,
          "shape": {"E": E, "hidden": HIDDEN, "intermediate": INTER, "top_k": TOPK, "moe_layers": LAYERS},
          "points": [], "skipped": [], "errors": []}


def left():
    return BUDGET_S - (time.time() - T0)


def save():
    path = os.path.join(OUT, "moe-bench.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULT, f, indent=1)
    os.replace(path + ".tmp", path)


def log(*args):
    print("[%6.1f s]" % (time.time() - T0), *args, flush=True)


def load_kernel():
    """vLLM's fused_moe_kernel and the helper it calls, their source as fused_moe.py holds it, in a module of its own."""
    with open(FUSED_MOE) as f:
        source = f.read()
    lines = source.splitlines()
    texts = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name in ("write_zeros_to_output", "fused_moe_kernel"):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            texts[node.name] = "\n".join(lines[first - 1:node.end_lineno])
    if len(texts) != 2:
        raise RuntimeError("fused_moe_kernel or write_zeros_to_output not in " + FUSED_MOE)
    folder = tempfile.mkdtemp(prefix="vllm-fused-moe-")
    path = os.path.join(folder, "vllm_fused_moe_kernel.py")
    with open(path, "w") as f:
        f.write("import triton\nimport triton.language as tl\n\n\n" + texts["write_zeros_to_output"] + "\n\n\n"
                + texts["fused_moe_kernel"] + "\n")
    spec = importlib.util.spec_from_file_location("vllm_fused_moe_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.fused_moe_kernel


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


def time_calls(calls):
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


def default_config(m):
    """vLLM 0.26.0 get_default_config for dtype fp8_w8a8 with block_shape [128, 128] on CUDA."""
    if m <= 8:
        block_n, stages = 64, (4 if m <= 4 else 3)
    else:
        block_n, stages = 128, 3
    return {"BLOCK_SIZE_M": 16 if m <= 64 else 64, "BLOCK_SIZE_N": block_n, "BLOCK_SIZE_K": 128,
            "GROUP_SIZE_M": 1 if m <= 16 else 32, "num_warps": 4, "num_stages": stages}


def tuned_config(m):
    """try_get_optimal_moe_config's pick from the tuned file: the nearest key (min over the file's keys in order)."""
    with open(TUNED_FILE) as f:
        table = json.load(f)
    table.pop("triton_version", None)
    configs = {int(key): value for key, value in table.items()}
    return dict(configs[min(configs.keys(), key=lambda x: abs(x - m))])


def sweep_configs(m):
    if m == 1:
        grid = [(bn, st, w) for bn in (32, 64, 128, 256) for st in (2, 3, 4, 5) for w in (4, 8)]
    else:
        grid = [(bn, st, 4) for bn in (32, 64, 128) for st in (3, 4, 5)]
    return [{"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": bn, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1, "num_warps": w,
             "num_stages": st} for bn, st, w in grid]


def quantise(x):
    """Per-token-group FP8 (group 128), float32 scales: what vLLM's per_token_group_fp8_quant makes."""
    groups = x.float().view(x.shape[0], -1, GROUP)
    scale = groups.abs().amax(dim=-1).clamp(min=1e-10) / 448.0
    q = (groups / scale[..., None]).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(x.shape)
    return q, scale.contiguous()


def align(topk_ids, block_m):
    """moe_align_block_size (vLLM's CUDA op) in torch: sorted token ids, expert id a block, tokens after padding."""
    numel = topk_ids.numel()
    max_padded = numel + E * (block_m - 1)
    if numel < E:
        max_padded = min(numel * block_m, max_padded)
    flat = topk_ids.flatten().long().cpu()
    counts = torch.bincount(flat, minlength=E)
    sorted_ids = torch.full((max_padded,), numel, dtype=torch.int32)
    expert_ids = torch.full(((max_padded + block_m - 1) // block_m,), -1, dtype=torch.int32)
    position = 0
    for expert in range(E):
        count = int(counts[expert])
        if count == 0:
            continue
        tokens = (flat == expert).nonzero().flatten().to(torch.int32)
        sorted_ids[position:position + count] = tokens
        blocks = (count + block_m - 1) // block_m
        expert_ids[position // block_m:position // block_m + blocks] = expert
        position += blocks * block_m
    return (sorted_ids.to(DEV), expert_ids.to(DEV), torch.tensor([position], dtype=torch.int32, device=DEV))


def launch(kernel, a, a_scale, w, w_scale, c, routed_weights, mul_routed, route, top_k, config):
    """invoke_fused_moe_triton_kernel for fp8_w8a8, block [128, 128], bf16 out, no bias."""
    sorted_ids, expert_ids, post_padded = route
    m = a.shape[0]
    block_m, block_n = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"]
    swap_ab = torch.cuda.get_device_capability() == (9, 0) and block_m < 64 <= block_n
    num_tokens = m * top_k
    if sorted_ids is not None:
        em = sorted_ids.shape[0]
        if m < block_m:
            em = min(em, m * top_k * block_m)
    else:
        em = num_tokens * block_m
    n = w.shape[1]
    grid = (triton.cdiv(em, block_m) * triton.cdiv(n, block_n),)
    meta = dict(config)
    meta["SPLIT_K"] = 1
    meta["BLOCK_SIZE_K"] = min(meta["BLOCK_SIZE_K"], GROUP)
    kernel[grid](a, w, c, None, a_scale, w_scale, routed_weights, sorted_ids, expert_ids, post_padded, n, w.shape[2],
                 em, num_tokens, a.stride(0), a.stride(1), w.stride(0), w.stride(2), w.stride(1), c.stride(1),
                 c.stride(2), a_scale.stride(0), a_scale.stride(1), w_scale.stride(0), w_scale.stride(2),
                 w_scale.stride(1), 0, 0, GROUP, GROUP, MUL_ROUTED_WEIGHT=mul_routed, top_k=top_k,
                 compute_type=tl.bfloat16, use_fp8_w8a8=True, use_int8_w8a8=False, use_int8_w8a16=False,
                 per_channel_quant=False, naive_block_assignment=sorted_ids is None, HAS_BIAS=False, SWAP_AB=swap_ab,
                 **meta)


class Step:
    """One decode step's 45 MoE layers at M tokens: routings, activations, outputs."""

    def __init__(self, m, weights):
        self.m, self.weights = m, weights
        self.topk_ids = [torch.rand(m, E, device=DEV).topk(TOPK, dim=1).indices.to(torch.int32)
                         for _layer in range(LAYERS)]
        self.topk_weights = [torch.rand(m, TOPK, device=DEV, dtype=torch.float32) for _layer in range(LAYERS)]
        self.a1, self.a1_scale = quantise(torch.randn(m, HIDDEN, device=DEV, dtype=torch.bfloat16))
        self.a2, self.a2_scale = quantise(torch.randn(m * TOPK, INTER, device=DEV, dtype=torch.bfloat16))
        self.c1 = torch.empty(m, TOPK, 2 * INTER, device=DEV, dtype=torch.bfloat16)
        self.c3 = torch.empty(m, TOPK, HIDDEN, device=DEV, dtype=torch.bfloat16)
        self.experts = sum(len(set(ids.flatten().tolist())) for ids in self.topk_ids) / LAYERS
        self.routes = {}

    def route(self, layer, block_m):
        naive = self.m * TOPK * 4 <= E
        key = (layer, "naive" if naive else block_m)
        if key not in self.routes:
            ids = self.topk_ids[layer]
            if naive:
                padded = torch.tensor([ids.numel() * block_m], dtype=torch.int32, device=DEV)
                self.routes[key] = (None, ids.flatten(), padded)
            else:
                self.routes[key] = align(ids, block_m)
        return self.routes[key]

    def layer_call(self, kernel, config, layer):
        w13, w13_s, w2, w2_s = self.weights[layer % len(self.weights)]
        route = self.route(layer, config["BLOCK_SIZE_M"])

        def call():
            launch(kernel, self.a1, self.a1_scale, w13, w13_s, self.c1, self.topk_weights[layer], False, route, TOPK,
                   config)
            launch(kernel, self.a2, self.a2_scale, w2, w2_s, self.c3, self.topk_weights[layer], True, route, 1, config)
        return call

    def check(self, kernel, config):
        """Layer 0 against float32 of the same dequantised numbers: both GEMMs, relative error."""
        self.layer_call(kernel, config, 0)()
        w13, w13_s, w2, w2_s = self.weights[0]
        a1 = self.a1.float() * self.a1_scale.repeat_interleave(GROUP, 1)
        a2 = (self.a2.float() * self.a2_scale.repeat_interleave(GROUP, 1)).view(self.m, TOPK, INTER)
        ids = self.topk_ids[0].long()
        ref1, ref3 = torch.empty_like(self.c1, dtype=torch.float32), torch.empty_like(self.c3, dtype=torch.float32)
        for expert in sorted(set(ids.flatten().tolist()))[:24]:
            rows, slots = (ids == expert).nonzero(as_tuple=True)
            d13 = w13[expert].float() * w13_s[expert].repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)
            d2 = w2[expert].float() * w2_s[expert].repeat_interleave(GROUP, 0).repeat_interleave(GROUP, 1)
            ref1[rows, slots] = a1[rows] @ d13.T
            ref3[rows, slots] = (a2[rows, slots] @ d2.T) * self.topk_weights[0][rows, slots, None]
        mask = torch.zeros(self.m, TOPK, dtype=torch.bool, device=DEV)
        for expert in sorted(set(ids.flatten().tolist()))[:24]:
            mask |= ids == expert
        err1 = float((self.c1.float()[mask] - ref1[mask]).norm() / ref1[mask].norm())
        err3 = float((self.c3.float()[mask] - ref3[mask]).norm() / ref3[mask].norm())
        return err1, err3


def point(step, name, config, timing, extra=None):
    per_expert = 3 * INTER * HIDDEN + 4 * ((2 * INTER // GROUP) * (HIDDEN // GROUP) + (HIDDEN // GROUP) * (INTER // GROUP))
    nbytes = step.experts * per_expert
    entry = {"tokens": step.m, "config_kind": name, "config": config, "us_a_layer": timing,
             "ms_a_step": timing["median"] * LAYERS / 1e3, "experts_a_layer": step.experts,
             "gb_s": nbytes / (timing["median"] * 1e-6) / 1e9,
             "of_copy_bandwidth": nbytes / (timing["median"] * 1e-6) / 1e9 / RESULT["copy_gb_s"]["median"]}
    if extra:
        entry.update(extra)
    RESULT["points"].append(entry)
    save()
    log("M=%-3d %-8s %8.2f us a layer [%.2f, %.2f] %5.1f %% of copy, %.1f experts %s" % (
        step.m, name, timing["median"], timing["min"], timing["max"], 100 * entry["of_copy_bandwidth"], step.experts,
        json.dumps(config)))


def run(kernel, weights, m):
    step = Step(m, weights)
    configs = [("default", default_config(m)), ("tuned", tuned_config(m))] + [("sweep", c) for c in sweep_configs(m)]
    seen = []
    for name, config in configs:
        if config in seen and name == "sweep":
            continue
        seen.append(config)
        if left() < 8:
            RESULT["skipped"].append("M=%d %s %s: budget" % (m, name, json.dumps(config)))
            continue
        try:
            extra = {}
            if name == "default" and m in (1, 16):
                extra["rel_error_w13"], extra["rel_error_w2"] = step.check(kernel, config)
            timing = time_calls([step.layer_call(kernel, config, layer) for layer in range(LAYERS)])
            point(step, name, config, timing, extra)
        except Exception as e:
            RESULT["errors"].append("M=%d %s %s: %r" % (m, name, json.dumps(config), e))
            log("error", RESULT["errors"][-1])
            save()


def summary():
    rows = {}
    for m in TOKENS:
        found = [p for p in RESULT["points"] if p["tokens"] == m]
        if not found:
            continue
        best = min(found, key=lambda p: p["us_a_layer"]["median"])
        row = {"best": {"config": best["config"], "kind": best["config_kind"], "us_a_layer": best["us_a_layer"]}}
        for kind in ("default", "tuned"):
            mine = [p for p in found if p["config_kind"] == kind]
            if mine:
                row[kind] = {"config": mine[0]["config"], "us_a_layer": mine[0]["us_a_layer"]}
        rows[str(m)] = row
    RESULT["summary"] = rows
    save()
    log("summary", json.dumps(rows, indent=1))


os.makedirs(OUT, exist_ok=True)
RESULT["torch"], RESULT["triton"] = torch.__version__, triton.__version__
RESULT["gpu"] = torch.cuda.get_device_name(0)
KERNEL = load_kernel()
RESULT["copy_gb_s"] = copy_bandwidth()
log("copy GB/s", RESULT["copy_gb_s"], "torch", torch.__version__, "triton", triton.__version__)
WEIGHTS = []
for index in range(SETS):
    w13_ = torch.empty(E, 2 * INTER, HIDDEN, device=DEV, dtype=torch.float8_e4m3fn)
    w2_ = torch.empty(E, HIDDEN, INTER, device=DEV, dtype=torch.float8_e4m3fn)
    if index == 0:  # the checked set: random numbers; the others are left as allocated (the kernels' time is the same)
        for expert_ in range(E):
            w13_[expert_] = (torch.randn(2 * INTER, HIDDEN, device=DEV, dtype=torch.bfloat16) * 0.5).to(w13_.dtype)
            w2_[expert_] = (torch.randn(HIDDEN, INTER, device=DEV, dtype=torch.bfloat16) * 0.5).to(w2_.dtype)
    WEIGHTS.append((w13_, torch.rand(E, 2 * INTER // GROUP, HIDDEN // GROUP, device=DEV) * 2e-3 + 1e-3,
                    w2_, torch.rand(E, HIDDEN // GROUP, INTER // GROUP, device=DEV) * 2e-3 + 1e-3))
log("weights: %d sets of %.2f GB" % (SETS, E * 3 * INTER * HIDDEN / 1e9))
for tokens_ in TOKENS:
    try:
        run(KERNEL, WEIGHTS, tokens_)
    except Exception as exc:
        RESULT["errors"].append("M=%d: %r" % (tokens_, exc))
        log("error", RESULT["errors"][-1])
RESULT["wall_s"] = time.time() - T0
summary()
log("done in %.1f s" % RESULT["wall_s"])
