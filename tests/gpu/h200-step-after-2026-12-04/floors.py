"""Issue 37 item 4's table from the traces profile_step.py kept (no GPU; on the workstation):

    LAYERS=46 python3 tests/gpu/h200-step-after-2026-12-04/floors.py BANDWIDTH_GB_S OUT.json TRACE...

For each trace (a profiled window of one request decoding), kernel by kernel in profile_step.py's families: ms a step,
kernels a step and the median kernel's microseconds, the bytes a decoded token must read for that family (the burn-in
GLM folder's config.json at LAYERS layers), the floor those bytes set at the measured copy bandwidth (bytes /
bandwidth; a copy reads and writes, a GEMV only reads, so a kernel can beat it: lm_head did, by 3 %, on 2026-12-02)
and the gap (ms a step - floor). Then the step: the kernels' sum, the period (first kernel's start to the last one's
end over the steps), the time some kernel runs (overlapping kernels counted once: under CUDA graphs vLLM's kernels
launch with programmatic dependent launch, start before their predecessor ends and wait inside, so their durations
add up to more than the period) and what is left of the period with no kernel running (idle).

Bytes a token, by family (1 byte a weight for the block-FP8 linears, as in plugins/module_utils/bound.py):
  block-FP8 GEMMs   attention projections (q, k, v, o) of every layer and the shared expert of every MoE layer
  fused_moe         num_experts_per_tok routed experts of every MoE layer
  lm_head           the bf16 output embedding
  other             layer 0's dense MLP (bf16: the checkpoint leaves it unquantised) and the router (fp32 in the trace)
  attention         the fp8 KV cache read at CONTEXT tokens (default 100: the profiled requests are short)
  the rest          ~0 (norm weights, logits)
"""
import gzip
import json
import os
import statistics
import sys

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(GPU))
BANDWIDTH, DEST, TRACES = float(sys.argv[1]), sys.argv[2], sys.argv[3:]
LAYERS = int(os.environ.get("LAYERS", "46"))
CONTEXT = int(os.environ.get("CONTEXT", "100"))
sys.argv = [sys.argv[0], os.path.dirname(os.path.abspath(DEST)), "analyse"]
sys.path.insert(0, GPU)
import profile_step as ps  # noqa: E402
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf  # noqa: E402


def config():
    with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
        template = f.read()
    with open(os.path.join(ROOT, "roles", "weights", "defaults", "main.yml")) as f:
        quant = yaml.safe_load(f)["weights_fp8_quantization"]
    return json.loads(dummy_hf.folder_files(template, "glm4_moe", LAYERS, quant)["config.json"])


def family_bytes(c):
    h, layers, heads, kv = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]
    head_dim = c.get("head_dim") or h // heads
    moe_layers = layers - c.get("first_k_dense_replace", 0)
    expert = 3 * h * c["moe_intermediate_size"]
    return {
        "block-FP8 GEMMs": layers * (2 * h * heads * head_dim + 2 * h * kv * head_dim) + moe_layers * c["n_shared_experts"] * expert,
        "fused_moe": moe_layers * c["num_experts_per_tok"] * expert,
        "lm_head": 2 * h * c["vocab_size"],
        "other": c.get("first_k_dense_replace", 0) * 3 * h * c["intermediate_size"] * 2 + moe_layers * h * c["n_routed_experts"] * 4,
        "attention": CONTEXT * layers * 2 * kv * head_dim,
    }


def family(name):
    """profile_step.py's family, but an Inductor kernel that fuses an RMSNorm is a norm even where Inductor names it
    after the op beside it (triton_red_fused__to_copy_fused_add_rms_norm_moe_forward_shared_0: the add and norm before
    the MoE layer, which profile_step.py's patterns put in fused_moe)."""
    if name.startswith("triton_") and "rms_norm" in name:
        return "norms, rotary, activation"
    return ps.family(name) or ("gemm?" if ps.GEMM_LIKE.search(name) else "other")


def analyse(path, c, nbytes):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                     key=lambda e: e["ts"])
    attention = sum(1 for k in kernels if ps.ATTENTION_MAIN.search(k.get("name", "")))
    steps = attention / float(c["num_hidden_layers"])
    per_name = {}
    for k in kernels:
        name = k.get("name", "?")
        fam = family(name)
        per_name.setdefault(name, [fam, []])[1].append(k["dur"])
    heads = [(sum(d) / len(d), name) for name, (fam, d) in per_name.items() if fam == "gemm?" and len(d) <= 1.5 * steps]
    head = max(heads)[1] if heads else None
    fams = {}
    for name, entry in per_name.items():
        fam, durs = entry
        fam = "lm_head" if name == head else ("other" if fam == "gemm?" else fam)
        entry[0] = fam
        fams.setdefault(fam, []).extend(durs)
    # the step's wall time by family: each stretch between two kernel starts or ends is split equally among the
    # kernels running in it (under CUDA graphs the shared expert runs on a second stream beside the routed experts,
    # and kernels launched with PDL start before their predecessor ends), so the shares add up to the time some
    # kernel runs
    edges = sorted([(k["ts"], 1, i) for i, k in enumerate(kernels)] + [(k["ts"] + k["dur"], 0, i) for i, k in enumerate(kernels)])
    running, last, wall = set(), None, {}
    for t, is_start, i in edges:
        if running and last is not None and t > last:
            for j in running:
                f_ = per_name[kernels[j].get("name", "?")][0]
                wall[f_] = wall.get(f_, 0.0) + (t - last) / len(running)
        last = t
        if is_start:
            running.add(i)
        else:
            running.discard(i)
    busy = sum(k["dur"] for k in kernels)
    period = kernels[-1]["ts"] + kernels[-1]["dur"] - kernels[0]["ts"]
    # the time at least one kernel runs (kernels overlap under CUDA graphs with programmatic dependent launch: a
    # kernel starts before its predecessor ends and waits inside, so its duration counts some of the predecessor's)
    covered, end = 0.0, None
    for k in kernels:
        s, e = k["ts"], k["ts"] + k["dur"]
        if end is None or s >= end:
            covered += e - s
            end = e
        elif e > end:
            covered += e - end
            end = e
    rows = []
    for fam in ps.FAMILY_ORDER + sorted(set(fams) - set(ps.FAMILY_ORDER)):
        durs = fams.get(fam, [])
        ms = sum(durs) / steps / 1000.0
        b = nbytes.get(fam, 0)
        floor = b / (BANDWIDTH * 1e9) * 1000.0
        rows.append({"family": fam, "ms_per_step": round(ms, 3), "wall_ms_per_step": round(wall.get(fam, 0.0) / steps / 1000.0, 3),
                     "kernels_per_step": round(len(durs) / steps, 1),
                     "median_kernel_us": round(statistics.median(durs), 2) if durs else None,
                     "gb_per_token": round(b / 1e9, 3), "floor_ms": round(floor, 3), "gap_ms": round(ms - floor, 3),
                     "of_floor": round(floor / ms, 3) if ms else None})
    top = sorted(per_name.items(), key=lambda kv: -sum(kv[1][1]))[:40]
    return {"trace": os.path.basename(path), "steps": round(steps, 1), "kernels_per_step": round(len(kernels) / steps, 1),
            "kernel_ms_per_step": round(busy / steps / 1000.0, 3), "period_ms_per_step": round(period / steps / 1000.0, 3),
            "covered_ms_per_step": round(covered / steps / 1000.0, 3),
            "idle_ms_per_step": round((period - covered) / steps / 1000.0, 3),
            "floor_ms": round(sum(r["floor_ms"] for r in rows), 3), "families": rows,
            "top_kernels": [{"family": fam, "name": name[:140], "per_step": round(len(d) / steps, 2),
                             "ms_per_step": round(sum(d) / steps / 1000.0, 4), "median_us": round(statistics.median(d), 2)}
                            for name, (fam, d) in top]}


def table(r):
    out = ["%s: %s steps, %s kernels a step" % (r["trace"], r["steps"], r["kernels_per_step"]), "",
           "| family | ms a step (kernel durations) | wall ms a step (overlaps split) | kernels a step | median kernel us "
           "| GB a token | floor ms | gap ms (durations) | floor / time |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for x in r["families"]:
        out.append("| %s | %.3f | %.3f | %s | %s | %s | %.3f | %.3f | %s |" % (
            x["family"], x["ms_per_step"], x["wall_ms_per_step"], x["kernels_per_step"], x["median_kernel_us"],
            x["gb_per_token"] or "~0", x["floor_ms"], x["gap_ms"],
            "%.0f %%" % (100 * x["of_floor"]) if x["of_floor"] and x["floor_ms"] > 0.01 else ""))
    out.append("| **kernels** | **%.3f** | **%.3f** | %s | | | **%.3f** | **%.3f** | %.0f %% |" % (
        r["kernel_ms_per_step"], r["covered_ms_per_step"], r["kernels_per_step"], r["floor_ms"],
        r["kernel_ms_per_step"] - r["floor_ms"], 100 * r["floor_ms"] / r["kernel_ms_per_step"]))
    out.append("| idle (no kernel running) | | %.3f | | | | | | |" % r["idle_ms_per_step"])
    out.append("| **step period** | | **%.3f** | | | | %.3f | %.3f | %.0f %% |" % (
        r["period_ms_per_step"], r["floor_ms"], r["period_ms_per_step"] - r["floor_ms"],
        100 * r["floor_ms"] / r["period_ms_per_step"]))
    return out


def main():
    c = config()
    nbytes = family_bytes(c)
    results = [analyse(p, c, nbytes) for p in TRACES]
    with open(DEST, "w") as f:
        json.dump({"bandwidth_gb_s": BANDWIDTH, "layers": LAYERS, "context": CONTEXT,
                   "bytes": nbytes, "results": results}, f, indent=1)
    for r in results:
        print("\n".join(table(r)) + "\n")


if __name__ == "__main__":
    main()
