"""Issue 37 item 1: where a decode step of a rendered vLLM command goes, kernel family by kernel family, from vLLM's
own torch profiler (vLLM 0.26.0: --profiler-config, POST /start_profile and /stop_profile), on a GPU machine with
vLLM importable (tests/gpu/RESULTS.md, "Carrying what the scripts need"):

    python3 tests/gpu/profile_step.py OUTDIR [SITE]
    python3 tests/gpu/profile_step.py OUTDIR analyse TRACE...   # the tables again from traces a run left (no GPU)

The command: the example recipe's, rendered by templates/vllm.j2 for one GPU and a text model as
bench_recipe_vs_defaults.py renders it (llm_drafter DRAFTER, default off; DROP and ADD as there), served on the
weights stage's burn-in GLM folder at LAYERS layers (46: GLM-4.6V-FP8's text shape; random weights,
--load-format dummy; DROP by default --kv-cache-memory-bytes: 100.9 GiB of weights and the recipe's 60 GiB KV cap do
not fit one H200); or ARGV, a JSON file holding any rendered argv (["vllm", "serve", MODEL, ...]), served as it is
on 127.0.0.1:PORT (8020; the argv's own --host and --port are replaced).

Each phase (PHASES, default "eager,graphs") is one server start with vLLM's torch profiler configured:

  eager   the command + --enforce-eager: every kernel is launched by itself and has its own name in the trace;
  graphs  the command as rendered (torch.compile and CUDA graphs), as it serves users.

In each phase, for each sampling mode (SAMPLING, default "default,greedy": the server's default sampling parameters,
which the recipe's generation config makes temperature 1.0, top-p 0.95 and top-k 20, or temperature 0), one request
at a time: a warm-up; the step time unprofiled (STEP_TOKENS tokens, 256: vLLM's inter-token latency histogram over
the request, and the client's chunk times); then a request that decodes while the profiler runs for WINDOW_S seconds
(1.0). The trace's decode steps are vLLM's own execute_context_0(0)_generation_1(1) annotations; every kernel from
the first such step's start to the last one's is put into one family by its name (FAMILIES, first match; lm_head:
the longest matrix kernel of each step that no family claims), and each family's time is given per step and as a
share of the kernel time, and, where the bytes it must read are known from the folder's config.json, as GB/s and a
share of the copy bandwidth measured on the GPU before the server starts.

ENGINE as bench_recipe_vs_defaults.py takes it (auto: vLLM's defaults where the bundle carries DeepGEMM's headers and
flashinfer). Out: OUTDIR/profile-PHASE.json (every window's families, the 30 costliest kernels, what vLLM chose),
OUTDIR/profile.md (the tables), OUTDIR/vllm-profile-PHASE.log. HEALTH_TIMEOUT (420 s) bounds each start. The traces
stay on the machine (TRACE_DIR, /root/profile-traces) unless KEEP_TRACE=1 copies the smallest window's to OUTDIR.
"""
import glob
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf, engines  # noqa: E402
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError, lines  # noqa: E402
import vllm_log  # noqa: E402  (beside this script)

OUT = sys.argv[1]
SITE = sys.argv[2] if len(sys.argv) > 2 else "/root/vllm/site"
LAYERS = int(os.environ.get("LAYERS", "46"))
PORT = int(os.environ.get("PORT", "8020"))
URL = "http://127.0.0.1:%d" % PORT
KEY = "sk-gpu-profile"
FOLDER = "/root/glm-dummy-fp8"
TRACE_DIR = os.environ.get("TRACE_DIR", "/root/profile-traces")
PHASES = [p for p in os.environ.get("PHASES", "eager,graphs").split(",") if p]
SAMPLING = [s for s in os.environ.get("SAMPLING", "default,greedy").split(",") if s]
WINDOW_S = float(os.environ.get("WINDOW_S", "1.0"))
STEP_TOKENS = int(os.environ.get("STEP_TOKENS", "256"))
DROP = [f for f in os.environ.get("DROP", "--kv-cache-memory-bytes").split(",") if f]
ADD = json.loads(os.environ.get("ADD") or "[]")
PROMPT = "Write a long story about a lighthouse keeper who collects the names of ships that never arrive."
DECODE_STEP = re.compile(r"^execute_context_0\(0\)_generation_1\(1\)$")

# Kernel families, the first pattern that matches a kernel's name wins (the order matters: the MoE's own
# activation quantisation is a block-FP8 kernel; the attention's query quantisation for the fp8 KV cache is
# attention's). lm_head and other are what no pattern claims.
FAMILIES = [
    ("fused_moe", r"fused_moe|moe_align|moe_sum|moe_|_moe|expert|grouped_topk|noaux|topkGating|topk_with_k2|topk_softmax"),
    ("attention", r"flash_|flash::|FlashAttn|fmha|BatchPrefill|BatchDecode|reshape_and_cache|concat_and_cache|"
                  r"paged_attention|[Aa]ttention|prepare_varlen|scaled_fp8_quant|reduce_segments"),
    ("block-FP8 GEMMs", r"deep_gemm|DeepGemm|deepgemm|blockscale|BlockScale|per_token_group|fp8_gemm|Fp8Gemm|w8a8|"
                        r"cutlass.*([Ff]p8|e4m3)|scale_1x128|_gpuserve_gemv|_gpuserve_finish"),
    ("norms, rotary, activation", r"rms_norm|rmsnorm|RMSNorm|layer_norm|LayerNorm|rotary|[Rr]ope|silu|act_and_mul|gelu|"
                                  r"swiglu|rsqrt|mean_mul_pow"),
    ("sampling", r"[Ss]ampl|ArgMax|argmax|TopKTopP|TopPRenorm|TopKRenorm|TopKMask|RadixTopK|top_k_top_p|topk_topp|"
                 r"[Ss]oft[Mm]ax|gumbel|[Ee]xponential|distribution_"),
]
ATTENTION_MAIN = re.compile(r"FlashAttnFwdSm|flash_fwd_kernel|flash_fwd_splitkv_kernel|BatchDecodeWithPagedKVCache|"
                            r"BatchPrefillWithPagedKVCache|kernel_unified_attention")  # one a layer a step
GEMM_LIKE = re.compile(r"gemm|gemv|nvjet|xmma|cublas|cutlass|matmul|wgmma|splitK", re.I)
FAMILY_ORDER = ["block-FP8 GEMMs", "fused_moe", "attention", "other", "norms, rotary, activation", "lm_head",
                "sampling"]


def log(line):
    print("%s %s" % (time.strftime("%H:%M:%S"), line), flush=True)


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return yaml.safe_load(f)


def family(name):
    for fam, pattern in FAMILIES:
        if re.search(pattern, name):
            return fam
    return None


def copy_bandwidth():
    """Device-to-device copy bandwidth through PyTorch (bytes read + written over the best of 10), GB/s."""
    import torch
    n = 4 << 30
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _warm in range(3):
        dst.copy_(src)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _timed in range(10):
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000.0)
    del src, dst
    torch.cuda.empty_cache()
    return round(2 * n / min(times) / 1e9, 1)


def rendered_command():
    """(argv, env, the folder's config or None): ARGV's, or the example recipe's for one GPU and a text model on the
    burn-in folder (dummy_hf, FP8 as the weights stage makes it for GLM-4.6V-FP8) at LAYERS layers."""
    if os.environ.get("ARGV"):
        with open(os.environ["ARGV"]) as f:
            argv = json.load(f)
        argv = drop_flags(argv, ["--host", "--port"]) + ["--host", "127.0.0.1", "--port", str(PORT)]
        config = None
        if os.path.exists(os.path.join(argv[2], "config.json")):
            with open(os.path.join(argv[2], "config.json")) as f:
                config = json.load(f)
        return drop_flags(argv, DROP) + ADD, {}, config
    with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
        files = dummy_hf.folder_files(f.read(), "glm4_moe", LAYERS, load("roles/weights/defaults/main.yml")["weights_fp8_quantization"])
    os.makedirs(FOLDER, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(FOLDER, name), "w") as f:
            f.write(text)
    defaults = dict((k, v) for k, v in load("roles/llm/defaults/main.yml").items() if "{{" not in str(v))
    settings = dict(defaults, **load("inventories/example/group_vars/llm_hosts/settings.yml"))
    # The engine binds llm_engine_host:llm_engine_port (as in bench_recipe_vs_defaults.py): served on PORT, no front.
    settings.update(llm_vision=False, llm_weights="dummy", llm_gpus=[0], llm_api_key=KEY, llm_host="127.0.0.1",
                    llm_port=PORT, llm_engine_host="127.0.0.1", llm_engine_port=PORT, llm_model_dense="fp8",
                    llm_drafter=os.environ.get("DRAFTER", "off"))
    import pynvml
    pynvml.nvmlInit()
    total = int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total // (1024 * 1024))
    with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
        rendered = engines.render(f.read(), engines.command_context(
            settings, {"model_dir": FOLDER, "dummy": True}, {"gpu_memory_total_mib": total}), {"llm_api_key": KEY})
    return drop_flags(rendered["argv"], DROP) + ADD, rendered["env"], json.loads(files["config.json"])


def drop_flags(argv, flags):
    """argv without each of `flags` and its value (the words after it up to the next flag)."""
    out, skipping = [], False
    for word in argv:
        if word.startswith("--"):
            skipping = word in flags
        if not skipping:
            out.append(word)
    return out


def family_bytes(config):
    """The bytes a decoded token must read for the families whose weights are known: the block-FP8 linears
    (attention projections and shared experts, 1 byte a weight), the routed experts (top-k of them) and lm_head."""
    if not config:
        return {}
    c = config.get("text_config") or config
    h, layers, heads = c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"]
    kv, head_dim = c.get("num_key_value_heads", heads), c.get("head_dim") or h // heads
    moe_layers = layers - c.get("first_k_dense_replace", 0)
    expert = 3 * h * c.get("moe_intermediate_size", 0)
    shared = c.get("n_shared_experts", 0) * expert
    return {"block-FP8 GEMMs": layers * (2 * h * heads * head_dim + 2 * h * kv * head_dim) + moe_layers * shared,
            "fused_moe": moe_layers * c.get("num_experts_per_tok", 0) * expert,
            "lm_head": h * c["vocab_size"] * 2}


def engine_env():
    """As bench_recipe_vs_defaults.py: trimmed sets VLLM_USE_DEEP_GEMM=0 VLLM_USE_FLASHINFER_SAMPLER=0, served leaves
    vLLM's defaults and puts nvcc on PATH, auto is served where the bundle holds DeepGEMM's headers and flashinfer."""
    engine = os.environ.get("ENGINE", "auto")
    if engine == "auto":
        has = os.path.isdir(os.path.join(SITE, "vllm", "third_party", "deep_gemm", "include")) and os.path.isdir(
            os.path.join(SITE, "flashinfer"))
        engine = "served" if has else "trimmed"
    if engine == "trimmed":
        return engine, {"VLLM_USE_DEEP_GEMM": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    return engine, {"PATH": os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin") + ":" + os.environ["PATH"]}


CHOSEN = {  # what vLLM chose, from its log
    "fp8_linear_kernel": r"Selected (\S+) for Fp8LinearMethod",
    "moe_backend": r"Using (\S+) Fp8 MoE backend",
    "moe_config": r"(Using configuration from \S+ for MoE layer|Using default MoE config)",
    "attention_backend": vllm_log.ATTENTION_BACKEND,
    "sampler": r"(Using FlashInfer for top-p & top-k sampling|FlashInfer top-p/top-k sampling \S+[^.\n]*)",
    "cudagraph_mode": r"'cudagraph_mode': <CUDAGraphMode\.(\w+)",
    "enforce_eager": r"enforce_eager=(\w+)",
    "engine_init": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+ s)",
}


def chosen(path):
    with open(path, errors="replace") as f:
        text = f.read()
    out = dict((k, m.group(1)) for k, m in ((k, re.search(p, text)) for k, p in CHOSEN.items()) if m)
    gemv = vllm_log.gemv_lines(text)
    if gemv:
        out["gemv"] = gemv
    return out


def serve(argv, env, phase, trace_dir):
    """Start vLLM with the profiler configured; (process, log file, seconds to healthy)."""
    profiler = {"profiler": "torch", "torch_profiler_dir": trace_dir, "torch_profiler_with_stack": False,
                "torch_profiler_dump_cuda_time_total": False, "ignore_frontend": True}
    argv = argv + (["--enforce-eager"] if phase == "eager" else []) + ["--profiler-config", json.dumps(profiler)]
    full_env = dict(os.environ, PYTHONPATH=SITE + ":" + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1",
                    **dict(engine_env()[1], **env))
    logf = open(os.path.join(OUT, "vllm-profile-%s.log" % phase), "w")  # noqa: SIM115  closed by stop()
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main"] + argv[1:], env=full_env,
                            stdout=logf, stderr=subprocess.STDOUT)
    probe = Client(URL, "", "", timeout=5)
    while time.time() - start < float(os.environ.get("HEALTH_TIMEOUT", "420")):
        if proc.poll() is not None:
            raise SystemExit("vLLM exited %s before it was healthy; see vllm-profile-%s.log" % (proc.returncode, phase))
        try:
            probe.get_text("/health", timeout=5)
            return proc, logf, round(time.time() - start, 1), argv
        except EndpointError:
            time.sleep(2)
    proc.kill()
    raise SystemExit("vLLM not healthy in %s s" % os.environ.get("HEALTH_TIMEOUT", "420"))


def stop(proc, logf):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    logf.close()


class Decode(threading.Thread):
    """One streamed completion of up to max_tokens tokens at 1 stream (ignore_eos), read until it ends or until
    stop() closes it (vLLM aborts a request whose client went away). Keeps the time of each chunk."""

    def __init__(self, client, model, sampling, max_tokens):
        threading.Thread.__init__(self, daemon=True)
        self.body = {"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                     "stream_options": {"include_usage": True}}
        if sampling == "greedy":
            self.body["temperature"] = 0
        self.client, self.times, self.usage, self.error, self._halt = client, [], None, None, threading.Event()
        self.conn = None

    def run(self):
        try:
            self.conn, response = self.client._send("/v1/completions", self.body, 900)  # noqa: SLF001
            if response.status != 200:
                self.error = "HTTP %s: %s" % (response.status, response.read()[:300])
                return
            for raw in lines(response):
                line = raw.strip()
                if self._halt.is_set():
                    break
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                chunk = json.loads(line[5:].strip().decode("utf-8", "replace"))
                if chunk.get("usage"):
                    self.usage = chunk["usage"]
                if chunk.get("choices"):
                    self.times.append(time.time())
        except Exception as e:  # noqa: BLE001  a closed connection ends the read; anything else is reported
            if not self._halt.is_set():
                self.error = "%s: %s" % (type(e).__name__, e)
        finally:
            if self.conn is not None:
                self.conn.close()

    def stop(self):
        self._halt.set()
        if self.conn is not None and self.conn.sock is not None:
            try:
                self.conn.sock.shutdown(2)
            except OSError:
                pass


def histogram_totals(text):
    """{metric: (sum, count)} of vLLM's latency histograms in a /metrics text, summed over their label sets."""
    out = {}
    for name in ("vllm:inter_token_latency_seconds", "vllm:request_time_per_output_token_seconds",
                 "vllm:time_per_output_token_seconds", "vllm:time_to_first_token_seconds"):
        s = sum(float(m) for m in re.findall(r"^%s_sum(?:\{[^}]*\})? ([\d.e+-]+)$" % re.escape(name), text, re.M))
        c = sum(float(m) for m in re.findall(r"^%s_count(?:\{[^}]*\})? ([\d.e+-]+)$" % re.escape(name), text, re.M))
        out[name] = (s, c)
    return out


def step_unprofiled(client, model, sampling):
    """The decode step at 1 stream over STEP_TOKENS tokens: vLLM's histograms' mean over the request, and the
    client's (last chunk - first chunk) / (chunks - 1)."""
    before = histogram_totals(client.metrics())
    d = Decode(client, model, sampling, STEP_TOKENS)
    d.run()
    after = histogram_totals(client.metrics())
    out = {"tokens": (d.usage or {}).get("completion_tokens"), "chunks": len(d.times), "error": d.error}
    for name, (s, c) in after.items():
        ds, dc = s - before[name][0], c - before[name][1]
        if dc > 0:
            out[name.split(":")[1] + "_mean_ms"] = round(1000 * ds / dc, 3)
    if len(d.times) > 2:
        out["client_step_ms"] = round(1000 * (d.times[-1] - d.times[0]) / (len(d.times) - 1), 3)
    return out


def post(client, path):
    status, text = client.call(path, body={}, timeout=300)
    if status != 200:
        raise SystemExit("%s answered %s: %s" % (path, status, text[:300]))


def profiled_window(client, model, sampling, trace_dir):
    """A request decodes while the profiler runs WINDOW_S seconds; the new trace file's path."""
    before = set(glob.glob(os.path.join(trace_dir, "*")))
    d = Decode(client, model, sampling, 100000)
    d.start()
    t = time.time()
    while len(d.times) < 8 and time.time() - t < 60 and d.is_alive():
        time.sleep(0.01)
    post(client, "/start_profile")
    time.sleep(WINDOW_S)
    post(client, "/stop_profile")
    d.stop()
    d.join(30)
    time.sleep(1)
    t = time.time()
    while time.time() - t < 120:
        new = [p for p in glob.glob(os.path.join(trace_dir, "*")) if p not in before and ".json" in p]
        if new:
            sizes = [os.path.getsize(p) for p in new]
            time.sleep(2)
            if sizes == [os.path.getsize(p) for p in new]:
                return max(new, key=os.path.getsize), d.error
        time.sleep(1)
    raise SystemExit("no trace in %s after /stop_profile" % trace_dir)


def analyse(path, bytes_by_family, bandwidth, layers=None):
    """The families of a trace's decode steps (see the module's docstring). The steps in the trace: its main
    attention kernels over the model's layers where `layers` is known (one a layer a step: a window that cuts a step
    counts its part on both sides), else vLLM's decode-step annotations (in eager mode vLLM 0.26.0 was seen to
    annotate two ranges a step, so layers are to be preferred)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f).get("traceEvents", [])
    kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")),
                     key=lambda e: e["ts"])
    gpu_steps = sorted(e["ts"] for e in events if e.get("cat") == "gpu_user_annotation" and DECODE_STEP.match(e.get("name", "")))
    cpu_steps = sorted(e["ts"] for e in events if e.get("cat") == "user_annotation" and DECODE_STEP.match(e.get("name", "")))
    other_steps = sorted(set(e.get("name", "") for e in events if e.get("cat") == "user_annotation"
                             and e.get("name", "").startswith("execute_") and not DECODE_STEP.match(e.get("name", ""))))
    attention = sum(1 for k in kernels if ATTENTION_MAIN.search(k.get("name", "")))
    if layers and attention >= layers:
        window, steps, how = kernels, attention / float(layers), "%d attention kernels / %d layers" % (attention, layers)
    else:
        starts = gpu_steps if len(gpu_steps) > 2 else cpu_steps
        if len(starts) < 3:
            return {"error": "%d decode steps in the trace (%d kernels)" % (len(starts), len(kernels))}
        window = [k for k in kernels if starts[0] <= k["ts"] < starts[-1]]
        steps, how = len(starts) - 1, "decode-step annotations"
    if not window:
        return {"error": "no kernels in the trace"}
    per_name = {}
    for k in window:
        name = k.get("name", "?")
        fam = family(name) or ("gemm?" if GEMM_LIKE.search(name) else "other")
        count, total, _fam = per_name.get(name, (0, 0.0, fam))
        per_name[name] = (count + 1, total + k["dur"], fam)
    # lm_head: of the matrix kernels no family claims, the one run at most once a step with the longest mean time.
    heads = [(total / count, name) for name, (count, total, fam) in per_name.items() if fam == "gemm?" and count <= 1.5 * steps]
    head = max(heads)[1] if heads else None
    per_family = {}
    for name, (count, total, fam) in per_name.items():
        fam = "lm_head" if name == head else ("other" if fam == "gemm?" else fam)
        per_name[name] = (count, total, fam)
        per_family[fam] = per_family.get(fam, 0.0) + total
    busy = sum(per_family.values())
    rows = []
    for fam in FAMILY_ORDER + sorted(set(per_family) - set(FAMILY_ORDER)):
        us = per_family.get(fam, 0.0)
        row = {"family": fam, "ms_per_step": round(us / steps / 1000, 3), "share": round(us / busy, 3) if busy else None}
        if fam in bytes_by_family and us:
            gb_s = bytes_by_family[fam] / (us / steps / 1e6) / 1e9
            row.update(gb_per_token=round(bytes_by_family[fam] / 1e9, 3), gb_s=round(gb_s, 1),
                       of_copy_bandwidth=round(gb_s / bandwidth, 3) if bandwidth else None)
        rows.append(row)
    top = sorted(per_name.items(), key=lambda kv: -kv[1][1])[:30]
    span = window[-1]["ts"] + window[-1]["dur"] - window[0]["ts"]
    return {"trace": os.path.basename(path), "trace_bytes": os.path.getsize(path), "events": len(events),
            "decode_steps": round(steps, 1), "steps_from": how, "decode_annotations": {"gpu": len(gpu_steps), "host": len(cpu_steps)},
            "other_step_annotations": other_steps[:5], "kernels_per_step": round(len(window) / steps, 1),
            "kernel_ms_per_step": round(busy / steps / 1000, 3), "step_period_ms": round(span / steps / 1000, 3), "families": rows,
            "top_kernels": [{"family": fam, "name": name[:160], "per_step": round(count / steps, 2),
                             "ms_per_step": round(total / steps / 1000, 4)} for name, (count, total, fam) in top]}


def table(result):
    lines_ = ["| kernel family | ms a step | share | GB a token | GB/s | of copy bandwidth |", "|---|---:|---:|---:|---:|---:|"]
    for row in result["families"]:
        lines_.append("| %s | %.3f | %s | %s | %s | %s |" % (
            row["family"], row["ms_per_step"], "%.0f %%" % (100 * row["share"]) if row["share"] is not None else "",
            row.get("gb_per_token", ""), row.get("gb_s", ""),
            "%.0f %%" % (100 * row["of_copy_bandwidth"]) if row.get("of_copy_bandwidth") else ""))
    lines_.append("| **kernels in all** | **%.3f** | %d kernels a step | | | |" % (
        result["kernel_ms_per_step"], round(result["kernels_per_step"])))
    lines_.append("| step period, profiled | %.3f | %s decode steps (%s) | | | |" % (
        result["step_period_ms"], result["decode_steps"], result["steps_from"]))
    return lines_


def report(results):
    md = ["# Where a decode step goes (tests/gpu/profile_step.py)", ""]
    for r in results:
        md += ["## %s (%s engine), healthy after %s s" % (r["phase"], r["engine"], r["healthy_after_s"]), "",
               "- command: `%s`" % r["command"], "- vLLM chose: %s" % json.dumps(r["chosen"]),
               "- copy bandwidth: %s GB/s" % r["copy_bandwidth_gb_s"], ""]
        for w in r["windows"]:
            md += ["### %s sampling" % w["sampling"], "",
                   "Unprofiled, 1 stream, %d tokens: %s" % (STEP_TOKENS, json.dumps(w["unprofiled"])), ""]
            if "families" in w.get("profile", {}):
                md += table(w["profile"]) + [""]
            else:
                md += ["profile: %s" % json.dumps(w.get("profile")), ""]
    with open(os.path.join(OUT, "profile.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def run_phase(phase, argv, env, config, bandwidth):
    trace_dir = os.path.join(TRACE_DIR, phase)
    shutil.rmtree(trace_dir, ignore_errors=True)
    os.makedirs(trace_dir)
    out = {"phase": phase, "engine": engine_env()[0], "copy_bandwidth_gb_s": bandwidth, "windows": [],
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    proc, logf, out["healthy_after_s"], out["argv"] = serve(argv, env, phase, trace_dir)
    out["command"] = " ".join(out["argv"])
    log("%s: healthy after %s s" % (phase, out["healthy_after_s"]))
    try:
        model = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv else argv[2]
        client = Client(URL, KEY, model, timeout=900)  # the recipe's key; a server without one ignores it
        for sampling in SAMPLING:
            w = {"sampling": sampling}
            warm = Decode(client, model, sampling, 32)
            warm.run()
            w["warmup_error"] = warm.error
            w["unprofiled"] = step_unprofiled(client, model, sampling)
            log("%s %s unprofiled: %s" % (phase, sampling, json.dumps(w["unprofiled"])))
            path, w["window_error"] = profiled_window(client, model, sampling, trace_dir)
            t = time.time()
            w["profile"] = analyse(path, family_bytes(config), bandwidth, (config or {}).get("num_hidden_layers"))
            w["profile"]["parse_s"] = round(time.time() - t, 1)
            log("%s %s profile: %s" % (phase, sampling, json.dumps({k: v for k, v in w["profile"].items() if k != "top_kernels"})))
            if os.environ.get("KEEP_TRACE") == "1" and os.path.getsize(path) < 15 << 20:
                shutil.copy(path, os.path.join(OUT, "trace-%s-%s.json.gz" % (phase, sampling)))
            out["windows"].append(w)
            with open(os.path.join(OUT, "profile-%s.json" % phase), "w") as f:
                json.dump(out, f, indent=1)
    finally:
        stop(proc, logf)
        out["chosen"] = chosen(os.path.join(OUT, "vllm-profile-%s.log" % phase))
        with open(os.path.join(OUT, "profile-%s.json" % phase), "w") as f:
            json.dump(out, f, indent=1)
    return out


def analyse_only(traces):
    """`profile_step.py OUTDIR analyse TRACE...` (no GPU): the tables of traces a run left, for the burn-in folder's
    config at LAYERS and the copy bandwidth BANDWIDTH (GB/s) measured in that run; OUTDIR/profile-analysed.json."""
    with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
        files = dummy_hf.folder_files(f.read(), "glm4_moe", LAYERS, load("roles/weights/defaults/main.yml")["weights_fp8_quantization"])
    config = json.loads(files["config.json"])
    bandwidth = float(os.environ.get("BANDWIDTH", "0")) or None
    out = []
    for path in traces:
        result = analyse(path, family_bytes(config), bandwidth, config["num_hidden_layers"])
        out.append(result)
        print("\n".join(["%s: %s steps (%s), %s ms of kernels a step" % (
            result.get("trace"), result.get("decode_steps"), result.get("steps_from"), result.get("kernel_ms_per_step"))]
            + (table(result) if "families" in result else [json.dumps(result)])))
    with open(os.path.join(OUT, "profile-analysed.json"), "w") as f:
        json.dump(out, f, indent=1)


def main():
    os.makedirs(OUT, exist_ok=True)
    if SITE == "analyse":
        analyse_only(sys.argv[3:])
        return
    if SITE not in sys.path:
        sys.path.append(SITE)
    argv, env, config = rendered_command()
    bandwidth = copy_bandwidth()
    log("copy bandwidth %s GB/s; command: %s" % (bandwidth, " ".join(argv)))
    results = []
    for phase in PHASES:
        results.append(run_phase(phase, argv, env, config, bandwidth))
        report(results)
    log("done: %s" % ", ".join("%s %s" % (r["phase"], [w["profile"].get("kernel_ms_per_step") for w in r["windows"]])
                               for r in results))


if __name__ == "__main__":
    main()
