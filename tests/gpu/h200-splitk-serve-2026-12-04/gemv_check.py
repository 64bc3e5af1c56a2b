"""On the GPU, in the patched vLLM 0.26.0 (PYTHONPATH=/root/vllm/site, with the engine part): the split-K GEMV of
0001-splitk-gemv-one-token.patch against the unpatched one-token path on the four block-FP8 linears of GLM-4.6V-FP8's
text shape, with the weight scale as DeepGEMM's post-processing leaves it (deepgemm_post_process_fp8_weight_block, as
FlashInferFp8DeepGEMMDynamicBlockScaledKernel.process_weights_after_loading runs it).

1. the scale's dtype, shape and strides after the post-processing, and whether its values are the checkpoint's;
2. the patch's own load check (_gpuserve_check: against flashinfer's swap-AB, the unpatched M < 32 branch, and
   float32 of the dequantised numbers, two activations; the workspace zero again);
3. the op itself (torch.ops.vllm.dynamic_flashinfer_deepgemm_blockscale_gemm at M = 1) with the GEMV on and off
   (the module's switch): each shape's calls of a decode step (46 attention, 45 shared-expert), each with its own
   weight copy, captured in one CUDA graph, REPLAYS replays between CUDA events, REPEATS times: us a call, median
   [min, max], as ../h200-splitk-gemv-2026-12-04/splitk_bench.py timed them.

    python3 gemv_check.py OUTDIR      writes OUTDIR/gemv-check.json
"""
import json
import os
import sys
import time

import torch

from vllm.model_executor.kernels.linear.scaled_mm import flashinfer as fm
from vllm.model_executor.layers.quantization.utils.fp8_utils import deepgemm_post_process_fp8_weight_block

OUT = sys.argv[1]
REPLAYS = int(os.environ.get("REPLAYS", "20"))
REPEATS = int(os.environ.get("REPEATS", "5"))
SHAPES = {"qkv_proj": (14336, 4096, 46), "o_proj": (4096, 12288, 46), "shared_gate_up": (2816, 4096, 45),
          "shared_down": (4096, 1408, 45)}
RESULT = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "replays": REPLAYS, "repeats": REPEATS,
          "device": torch.cuda.get_device_name(0), "shapes": {}}


def save():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "gemv-check.json"), "w") as f:
        json.dump(RESULT, f, indent=1)


def op(x, w, s):
    return torch.ops.vllm.dynamic_flashinfer_deepgemm_blockscale_gemm(x, w, s, 128, False)


def timed(calls):
    for call in calls:  # every call once outside the capture (the GEMV's workspace of each copy made there)
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


def main():
    torch.manual_seed(0)
    step = {"on": 0.0, "off": 0.0}
    for name, (n, k, calls) in SHAPES.items():
        entry = RESULT["shapes"].setdefault(name, {"N": n, "K": k, "calls_a_step": calls})
        w = (torch.randn(n, k, device="cuda") * 0.5).to(torch.float8_e4m3fn)
        s = torch.rand((n + 127) // 128, (k + 127) // 128, device="cuda") * 2e-3 + 1e-3
        w2, s2 = deepgemm_post_process_fp8_weight_block(wq=w.clone(), ws=s.clone(), quant_block_shape=(128, 128),
                                                        use_e8m0=False)
        entry["scale_after_deepgemm"] = {"dtype": str(s2.dtype), "shape": list(s2.shape), "stride": list(s2.stride()),
                                         "values_equal": bool(s2.shape == s.shape and torch.equal(s2, s)),
                                         "weight_equal": bool(torch.equal(w2.view(torch.uint8), w.view(torch.uint8)))}
        print(name, entry["scale_after_deepgemm"], flush=True)
        entry["check"] = fm._gpuserve_check(w2, s2, "gemv_check.py")
        print(name, json.dumps(entry["check"]), flush=True)
        copies = [(w2, s2)] + [(w2.clone(), s2.clone()) for _i in range(calls - 1)]
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        for on in (True, False):
            fm._GPUSERVE_GEMV_ON = on
            t = timed([lambda c=c: op(x, *c) for c in copies])
            entry["us_gemv_" + ("on" if on else "off")] = t
            step["on" if on else "off"] += t["median"] * calls / 1e3
            print("%-14s GEMV %-3s %7.2f us a call [%.2f, %.2f]" % (name, "on" if on else "off", t["median"],
                                                                    t["min"], t["max"]), flush=True)
        fm._GPUSERVE_GEMV_ON = True
        out_on = op(x, w2, s2)
        fm._GPUSERVE_GEMV_ON = False
        out_off = op(x, w2, s2)
        fm._GPUSERVE_GEMV_ON = True
        entry["op_on_vs_off"] = fm._gpuserve_rel(out_on, out_off)
        del copies, w, s, w2, s2
        torch.cuda.empty_cache()
        save()
    RESULT["ms_a_step"] = step
    RESULT["delta_ms_a_step"] = step["on"] - step["off"]
    print("a step (the 4 linears): GEMV on %.3f ms, off %.3f ms, delta %.3f ms"
          % (step["on"], step["off"], step["on"] - step["off"]), flush=True)
    save()


if __name__ == "__main__":
    main()
