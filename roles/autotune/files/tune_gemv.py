"""The one-token split-K GEMV's configs (vLLM patch 0004) for a model's block-FP8 linears, measured on this GPU.

    python3 tune_gemv.py --out /autotune/gemv.json --shape NxK:CALLS [--shape NxK:CALLS ...]

Runs in the engine's image (vLLM with the collection's patches), on a GPU nothing else uses. For each shape (N x K,
and CALLS: how many such linears one decode step runs): every config of a grid - tiles of BLOCK_N x BLOCK_K weight
bytes for 4 or 8 warps, K split into the counts nearest 1, 2 and 4 programs an SM, split sums by fp32 atomics or a
per-tile counter - is timed on one token inside a CUDA graph over weight copies that leave the L2 cache behind, as
a decode step reads them; vLLM's own one-token kernel (the patch off) is timed the same way. The fastest configs are
timed again, and of those that pass the patch's own load check (within 2 % of vLLM's kernel on random weights,
finite, the workspace left zero) the shape's entry is (choose): on a GPU of the built-in configs' SM count the
patch's built-in config where it has one and vLLM's kernel does not beat it beyond the repeats' spread
(keeps_built_in), even where a grid config was faster alone (served, those did not pay); else the fastest config
that beats vLLM's kernel beyond the spread (gemv_pays); else none (the engine then keeps vLLM's kernel for that
shape). The file is written whole at the end
(gemv.json.part, then renamed); the engine reads it through GPUSERVE_GEMV_CONFIGS. An image whose vLLM lacks the
patch gets a file that lists no shape, and says why.
"""
import argparse
import json
import math
import os
import sys
import time

FORMAT = 1
SCREEN = {"replays": 10, "repeats": 3}
FINAL = {"replays": 20, "repeats": 5}
FINALISTS = 4  # the fastest of the screen, timed again with FINAL
# The SMs of the GPUs patch 0004's built-in configs were measured and served on (H200, and H100 SXM: 132): their K
# splits follow from it. On another count a built-in config gets no preference (choose).
BUILT_IN_SMS = 132


def gemv_pays(gemv_us, vllm_us):
    """Whether the GEMV beats vLLM's kernel beyond the timings' spread: its slowest repeat faster than vLLM's
    fastest. Not a fixed margin: on an H200 a 2 % margin kept vLLM's kernel for GLM-4.6V's qkv (the GEMV 18.43 us
    [18.41, 18.50] against 18.57 [18.55, 18.65], 0.7 %), and served, the GEMV there gave 154.0 tok/s at one
    request against the table's 152.7 (tests/gpu/h200-gemv-serve-2026-12-05/)."""
    return gemv_us["max"] < vllm_us["min"]


def keeps_built_in(built_in_us, vllm_us):
    """Whether a shape keeps the patch's built-in config (choose): unless vLLM's kernel beats it beyond the spread.
    On an H200 the table that sent qkv back to vLLM's kernel because the built-in config (18.34 us [18.27, 18.57])
    did not beat it (18.40 [18.38, 18.59]) served slower than no table, twice: 153.1 and 153.0 tok/s against 154.5
    and 154.1 (tests/gpu/h200-attention-gemv-2026-12-05/)."""
    return built_in_us is not None and not gemv_pays(vllm_us, built_in_us)


def choose(final, vllm_us, built_in, passes_check, sms=BUILT_IN_SMS):
    """(config, its timings, kept) for a shape, from the final timings [(us, config)] fastest first:
    1. on a GPU of the built-in configs' SM count, the patch's built-in config, where it passes the load check and
       vLLM's kernel does not beat it beyond the spread (keeps_built_in), even where a grid config was faster
       alone: on an H100 at 24 layers (tests/gpu/h100-gemv-table-2026-12-06/) a table of grid configs 0.5-8 %
       faster a call on three shapes served slower than the built-in configs beyond the spread in two pairs of
       starts (-0.8, -0.6 %) and within it in the third (+0.3 %). A kernel timed alone does not see the step it
       runs in (the shared expert's GEMVs beside the routed experts on a second stream, the finishing kernel of an
       atomic sum);
    2. else the fastest config that passes the check and beats vLLM's kernel beyond the spread (gemv_pays): a
       shape the built-in configs do not cover (another model, another GPU count), a GPU of another SM count, or
       a shape where vLLM's kernel beats the built-in config;
    3. else none: vLLM's kernel."""
    timed_as = dict((tuple(c), t) for t, c in final)
    if built_in and sms == BUILT_IN_SMS and keeps_built_in(timed_as.get(tuple(built_in)), vllm_us) \
            and passes_check(built_in):
        return built_in, timed_as[tuple(built_in)], True
    for times, cfg in final:
        if cfg != built_in and gemv_pays(times, vllm_us) and passes_check(cfg):
            return cfg, times, False
    return None, None, False


def log(text):
    print("tune_gemv: %s" % text, flush=True)


def parse_shape(text):
    dims, _sep, calls = text.partition(":")
    n, k = (int(v) for v in dims.lower().split("x"))
    return n, k, int(calls or 1)


def tiles():
    """(BLOCK_N, BLOCK_K, warps): rows within one 128-row scale block, K steps of whole 128-column scale blocks,
    32-128 weight bytes a thread a step (one pipeline stage: Triton pipelines only loads that feed tl.dot)."""
    found = []
    for warps in (4, 8):
        for bn in (16, 32, 64, 128):
            for bk in (128, 256, 512):
                if 1024 * warps <= bn * bk <= 4096 * warps:
                    found.append((bn, bk, warps))
    return found


def splits(n, k, bn, bk, sms):
    """The SPLIT_K values (as the launch rounds them) whose grids come nearest 1, 2 and 4 programs an SM, and 1."""
    tiles_n, blocks = -(-n // bn), -(-k // bk)
    grids = {}
    for split in range(1, blocks + 1):
        per = -(-blocks // split)
        grids.setdefault(-(-blocks // per), tiles_n * -(-blocks // per))
    chosen = {1}
    for target in (sms, 2 * sms, 4 * sms):
        chosen.add(min(grids, key=lambda s: abs(math.log(grids[s] / target))))
    return sorted(chosen)


def configs(n, k, sms):
    out = []
    for bn, bk, warps in tiles():
        for split in splits(n, k, bn, bk, sms):
            for reduce in (("direct",) if split == 1 else ("atomic", "counter")):
                out.append((bn, bk, warps, split, reduce))
    return out


def stats(runs):
    runs = sorted(runs)
    return {"median": round(runs[len(runs) // 2], 3), "min": round(runs[0], 3), "max": round(runs[-1], 3)}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", action="append", default=[], type=parse_shape, help="NxK:CALLS")
    args = parser.parse_args(argv)
    result = {"format": FORMAT, "made": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "shapes": {}}
    try:
        import torch
        from vllm import __version__ as vllm_version
        from vllm.model_executor.kernels.linear.scaled_mm import flashinfer as fm
    except ImportError as e:
        result.update(device_name=None, skipped="vLLM or torch cannot be imported here: %s" % e)
        return write(args.out, result, 0)
    result.update(device_name=torch.cuda.get_device_name(0), vllm=vllm_version)
    if not hasattr(fm, "_gpuserve_gemv_launch"):
        result["skipped"] = "this image's vLLM lacks the collection's patch 0004 (the split-K GEMV)"
        log(result["skipped"])
        return write(args.out, result, 0)
    props = torch.cuda.get_device_properties(0)
    sms = props.multi_processor_count
    l2 = getattr(props, "L2_cache_size", 64 << 20) or (64 << 20)
    result.update(sms=sms, l2_bytes=l2)
    log("%s, %d SMs, vLLM %s: %d shape(s)" % (result["device_name"], sms, vllm_version, len(args.shape)))
    torch.manual_seed(0)
    step = {"gemv": 0.0, "vllm": 0.0}
    for n, k, calls in args.shape:
        entry = tune_shape(torch, fm, n, k, calls, sms, l2)
        result["shapes"]["%dx%d" % (n, k)] = entry
        best = entry["gemv_us"]["median"] if entry["config"] else entry["vllm_us"]["median"]
        step["gemv"] += best * calls / 1e3
        step["vllm"] += entry["vllm_us"]["median"] * calls / 1e3
        torch.cuda.empty_cache()
    result["step_ms"] = {"tuned": round(step["gemv"], 4), "vllm": round(step["vllm"], 4)}
    log("a decode step's block-FP8 linears at one token: %.3f ms tuned, %.3f ms with vLLM's kernel"
        % (step["gemv"], step["vllm"]))
    return write(args.out, result, 0)


def tune_shape(torch, fm, n, k, calls, sms, l2):
    started = time.time()
    nbytes = n * k + 4 * -(-n // 128) * -(-k // 128)
    copies = max(2, min(calls, math.ceil(4 * l2 / nbytes)))
    weights = []
    for _copy in range(copies):  # fp8 weights and float32 128 x 128 block scales as DeepGEMM's post-processing leaves
        w = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        s = torch.rand(-(-n // 128), -(-k // 128), device="cuda") * 2e-3 + 1e-3
        weights.append((w, s, torch.empty((1, n), dtype=torch.bfloat16, device="cuda"), fm._gpuserve_workspace(n, "cuda")))
    x = torch.randn(1, k, device="cuda").to(torch.bfloat16)

    def vllm_calls():
        return [lambda w=w, s=s: torch.ops.vllm.dynamic_flashinfer_deepgemm_blockscale_gemm(x, w, s, 128, False)
                for w, s, _o, _ws in weights]

    def gemv_calls(cfg):
        return [lambda w=w, s=s, o=o, ws=ws: fm._gpuserve_gemv_launch(x, w, s, o, ws[0], ws[1], cfg)
                for w, s, o, ws in weights]

    fm._GPUSERVE_GEMV_ON = False  # the op's unpatched path: flashinfer's swap-AB at one token
    try:
        vllm_us = timed(torch, vllm_calls(), **FINAL)
    finally:
        fm._GPUSERVE_GEMV_ON = True
    built_in = fm._GPUSERVE_GEMV_CONFIGS.get((n, k))
    grid = configs(n, k, sms)
    if built_in and built_in not in grid:
        grid.append(built_in)
    screened, failed = [], 0
    for cfg in grid:
        try:
            screened.append((timed(torch, gemv_calls(cfg), **SCREEN)["median"], cfg))
        except Exception as e:  # pylint: disable=broad-except  # a config Triton cannot compile or run here
            failed += 1
            if failed <= 3:
                log("%dx%d %s: %s" % (n, k, cfg, str(e).splitlines()[0][:200] if str(e) else type(e).__name__))
    screened.sort()
    finalists = [cfg for _us, cfg in screened[:FINALISTS]]
    if built_in and built_in not in finalists and any(c == built_in for _u, c in screened):
        finalists.append(built_in)
    final = [(timed(torch, gemv_calls(cfg), **FINAL), cfg) for cfg in finalists]
    final.sort(key=lambda t: t[0]["median"])
    entry = {"calls": calls, "copies": copies, "tried": len(grid), "failed": failed, "vllm_us": vllm_us,
             "built_in": list(built_in) if built_in else None, "config": None, "gemv_us": None}
    if built_in:
        entry["built_in_us"] = next((t for t, c in final if c == built_in), None)
    worst_of = {}

    def passes_check(cfg):
        fm._GPUSERVE_TUNED[(n, k)] = cfg  # the patch's load check, with this config
        try:
            checked = fm._gpuserve_check(weights[0][0], weights[0][1], "tune_gemv.py")
        finally:
            fm._GPUSERVE_TUNED.pop((n, k), None)
        worst_of[cfg] = worst = max(v["gemv_vs_unpatched"] for v in checked.values())
        if worst > 0.02 or not all(v["workspace_zero"] and v["finite"] for v in checked.values()):
            log("%dx%d %s: refused by the load check (%.2e from vLLM's kernel)" % (n, k, cfg, worst))
            return False
        return True

    cfg, times, kept = choose(final, vllm_us, built_in, passes_check, sms)
    fastest = final[0] if final else None
    if fastest and fastest[1] != cfg:  # what the grid's fastest gave alone, beside what was written
        entry["fastest"] = {"config": list(fastest[1]), "us": fastest[0]}
    if cfg:
        entry.update(config=list(cfg), gemv_us=times, check_worst=round(worst_of[cfg], 6))
        if kept:
            entry["kept"] = "built-in"
    log("%dx%d (%d a step): %s, %s us a call against vLLM's %.2f us [%d configs, %d failed, %.0f s]" % (
        n, k, calls, ("GEMV %s%s" % (entry["config"], " (built-in, kept)" if entry.get("kept") else ""))
        if entry["config"] else "vLLM's kernel kept",
        "%.2f" % entry["gemv_us"]["median"] if entry["gemv_us"] else "-", vllm_us["median"], len(grid), failed,
        time.time() - started))
    del weights
    return entry


def timed(torch, calls, replays, repeats):
    """Microseconds a call (median, min, max of `repeats`), the calls captured once in a CUDA graph and replayed."""
    for call in calls:  # once outside the capture: Triton compiles, the op's lazy state is made
        call()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for call in calls:
            call()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    runs = []
    for _repeat in range(repeats):
        start.record()
        for _replay in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1e3 / (replays * len(calls)))
    del graph
    return stats(runs)


def write(path, result, code):
    part = path + ".part"
    with open(part, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    os.replace(part, path)
    log("wrote %s (%d shape(s) with the GEMV)" % (path, sum(1 for e in result["shapes"].values() if e["config"])))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
