"""Issues 13 and 27 on a GPU machine with vLLM importable (docs/engines.md): the burn-in GLM-4.5-Air-shaped folder
(the weights stage's own code, FP8 block-quantized as for GLM-4.6V-FP8, 8 layers + the MTP layer), served
one way a call, and measured with the bench and verify code the playbooks run on a host:

    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR defaults [SITE]   # vllm serve FOLDER --load-format dummy
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR recipe [SITE]     # templates/vllm.j2, the example's settings
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR recipe-no-mtp [SITE]  # the same with llm_drafter: off
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR recipe-mtp [SITE]     # the same with llm_drafter: mtp
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR recipe-ngram [SITE]   # the same with llm_drafter: ngram
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR designed [SITE]   # the recipe on hand-set weights: verify
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR report A.json B.json ...  # side by side (no GPU)

bench warms every row up at its own shape and times it REPEATS times (medians, min-max range). After the
decode rows, vLLM 0.26.0's own `vllm bench serve` (in this process: random prompts on /v1/completions,
as long as bench's prose prompts, the same reply length, greedy, ignore_eos, its own warm-up) runs
against the same server at SIDE concurrencies, so the two can be put side by side. What vLLM chose
(attention and MoE backends, CUDA graph sizes, KV cache size) is read from its log.

Environment: REPEATS (3), REPLY (256), CONCURRENCY (1,4,16,40,64), KINDS (prose,structured,code),
SIDE (1,16,64; empty: none), BUDGET_S (540: no new measurement starts after this many seconds from the
script's start; what is left out is listed), DROP (bisection: flags, comma-separated, taken out of the
rendered recipe command with their values), VERIFY (1: verify after bench in recipe-mtp), NAME (the
run's name in its files; default MODE, with the dropped flags), PREFILL
(2048,8192,32768: the cold prompt sizes; empty: none), REUSE (1; 0: no prompt-reuse row), ADD (flags added to the
served command, as one JSON list of words), ENGINE (auto: vLLM's own defaults where the bundle holds what they need
(tests/gpu/carry.sh engine: DeepGEMM's headers and flashinfer), else the trimmed engine; trimmed:
VLLM_USE_DEEP_GEMM=0 VLLM_USE_FLASHINFER_SAMPLER=0 as before 2026-12-02; served: vLLM's defaults), TEMPERATURES (0:
the decode rows greedy, as bench on a host; e.g. 1.0,0: every decode row at temperature 1.0, then again greedy, on the
same server; a row records its temperature and, where the engine drafts, vLLM's draft counters over the row).

The recipe runs first put the rendered command through vLLM's own argument parser. The defaults run
first measures the GPU's copy bandwidth (PyTorch, device to device) for the memory-bandwidth bound.
The designed run serves the same folder shape (2 layers + MTP, bf16) with dummy_hf_weights' hand-set
model.safetensors instead of random weights, and runs verify only: grammar-constrained replies close,
and the MTP layer agrees with its model.
"""
import json
import os
import re
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.gpuserve.llm.plugins.module_utils import bound, dummy_hf, dummy_hf_weights, engines  # noqa: E402
import vllm_log  # noqa: E402  (beside this script)

OUT, MODE = sys.argv[1], sys.argv[2]
SITE = sys.argv[3] if len(sys.argv) > 3 and MODE != "report" else "/root/vllm/site"
LAYERS = int(os.environ.get("LAYERS", "8"))
KEY = "sk-gpu-recipe"
PORT = 8020
URL = "http://127.0.0.1:%d" % PORT
FOLDER = "/root/glm-dummy-fp8"
DESIGNED = "/root/glm-designed"
T0 = time.time()


def env_list(name, default, cast=str):
    return [cast(v) for v in os.environ.get(name, default).split(",") if v.strip()]


BENCH = {"concurrency": env_list("CONCURRENCY", "1,4,16,40,64", int),
         "kinds": env_list("KINDS", "prose,structured,code"), "reply_tokens": int(os.environ.get("REPLY", "256")),
         "ignore_eos": True, "prefill_sizes": env_list("PREFILL", "2048,8192,32768", int), "prefill_reply_tokens": 8,
         "reuse_tokens": 32768, "reuse_turns": 5, "repeats": int(os.environ.get("REPEATS", "3")), "warmup": True}
SIDE = env_list("SIDE", "1,16,64", int)
BUDGET_S = float(os.environ.get("BUDGET_S", "540"))
DROP = env_list("DROP", "")
TEMPERATURES = env_list("TEMPERATURES", "0", float)
SPEC_COUNTERS = {"drafts": "vllm:spec_decode_num_drafts_total", "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
                 "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total"}
ADD = json.loads(os.environ.get("ADD") or "[]")
os.makedirs(OUT, exist_ok=True)


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return yaml.safe_load(f)


def log(line):
    print("%s %s" % (time.strftime("%H:%M:%S"), line), flush=True)


def write_folder(folder, layers, overrides=None):
    """The weights stage's burn-in folder (dummy_hf) at `folder`; returns its config."""
    with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
        template = f.read()
    files = dummy_hf.folder_files(template, "glm4_moe", layers, overrides)
    os.makedirs(folder, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(folder, name), "w") as f:
            f.write(text)
    return json.loads(files["config.json"])


def make_folder():
    return write_folder(FOLDER, LAYERS, load("roles/weights/defaults/main.yml")["weights_fp8_quantization"])


def make_designed_folder():
    """The burn-in folder (bf16, 2 layers + MTP) with the hand-set weights written beside it."""
    config = write_folder(DESIGNED, 2)
    t = time.time()
    dummy_hf_weights.write(os.path.join(DESIGNED, "model.safetensors"), config)
    st = os.stat(os.path.join(DESIGNED, "model.safetensors"))
    log("model.safetensors written in %.1f s: %.1f GB long, %.1f MB on disk" % (
        time.time() - t, st.st_size / 1e9, st.st_blocks * 512 / 1e6))
    return config, {"seconds": round(time.time() - t, 1), "bytes": st.st_size, "on_disk": st.st_blocks * 512}


def copy_bandwidth():
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
    best = min(times)
    return {"bytes_moved": 2 * n, "seconds_best": best, "gb_s": round(2 * n / best / 1e9, 1),
            "name": torch.cuda.get_device_name(0), "torch": torch.__version__}


def settings_recipe():
    defaults = dict((k, v) for k, v in load("roles/llm/defaults/main.yml").items() if "{{" not in str(v))
    settings = dict(defaults, **load("inventories/example/group_vars/llm_hosts/settings.yml"))
    # The example recipe on one GPU, as a text model (the burn-in folder has no vision tower).
    # The engine binds llm_engine_host:llm_engine_port (the front's commit a1cd9a5; the default port is a template,
    # llm_port + 10000, which the filter above leaves out): here the engine itself is served on PORT, no front.
    settings.update(llm_vision=False, llm_weights="dummy", llm_gpus=[0], llm_api_key=KEY, llm_host="127.0.0.1",
                    llm_port=PORT, llm_engine_host="127.0.0.1", llm_engine_port=PORT, llm_model_dense="fp8")
    return settings


def gpu_memory_mib():
    import pynvml
    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total // (1024 * 1024))


def check_args(argv):
    """vLLM's own parser, as `vllm serve` parses before it loads anything."""
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.openai.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:
        from vllm.utils import FlexibleArgumentParser
    args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model"] + argv[2:])
    engine = AsyncEngineArgs.from_cli_args(args)
    return {k: str(getattr(engine, k, None))[:120] for k in (
        "max_num_seqs", "max_model_len", "kv_cache_dtype", "kv_cache_memory_bytes", "speculative_config",
        "enable_prefix_caching", "structured_outputs_config")}


def drop_flags(argv, flags):
    """argv without each of `flags` and its value (the words after it up to the next flag)."""
    out, skipping = [], False
    for word in argv:
        if word.startswith("--"):
            skipping = word in flags
        if not skipping:
            out.append(word)
    return out


CHOSEN = {  # what vLLM chose, from its log: (pattern, what)
    "attention_backend": vllm_log.ATTENTION_BACKEND,
    "moe_backend": r"Using (\S+) Fp8 MoE backend",
    "cudagraph_mode": r"'cudagraph_mode': <CUDAGraphMode\.(\w+)",
    "cudagraph_capture_sizes": r"'cudagraph_capture_sizes': \[([^\]]*)\]",
    "max_num_batched_tokens": r"max_num_batched_tokens=(\d+)",
    "async_scheduling": r"Asynchronous scheduling is (\w+)\.",
    "max_num_seqs": r"'max_num_seqs': (\d+)",
    "kv_cache_dtype": r"kv_cache_dtype=(\w+)",
    "kv_cache_memory": r"Available KV cache memory: ([\d.]+ GiB)",
    "kv_cache_tokens": r"GPU KV cache size: ([\d,]+) tokens",
    "max_concurrency": r"Maximum concurrency for ([\d,]+ tokens per request: [\d.]+x)",
    "weights_memory": r"Model loading took ([\d.]+ GiB)",
    "cuda_graph_memory": r"Graph capturing finished in .*?([\d.]+ GiB)",
    "engine_init": r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+ s)",
    "spec_decode": r"speculative_config=(SpeculativeConfig\([^)]*\)|None)",
    "fp8_linear_kernel": r"Selected (\S+) for Fp8LinearMethod",
    "moe_config": r"(Using configuration from \S+ for MoE layer|Using default MoE config)",
    "sampler": r"(Using FlashInfer for top-p & top-k sampling|FlashInfer top-p/top-k sampling \S+[^.\n]*)",
    "deep_gemm_warmup": r"(DeepGemm\S* warmup[^\n]*?\d+/\d+[^\n]{0,40})",
}


def chosen(log_path):
    try:
        with open(log_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return {}
    out = {}
    for key, pattern in CHOSEN.items():
        m = re.search(pattern, text)
        if m:
            out[key] = m.group(1)
    gemv = vllm_log.gemv_lines(text)
    if gemv:
        out["gemv"] = gemv
    sizes = out.pop("cudagraph_capture_sizes", None)
    if sizes is not None:
        sizes = [int(v) for v in sizes.split(",") if v.strip()]
        out["cudagraph_sizes"] = "%d sizes, %s" % (len(sizes), ", ".join(map(str, sizes[:6])) + (
            " ... %d" % sizes[-1] if len(sizes) > 6 else ""))
    return out


def vllm_bench_serve(model, key, concurrency, input_len, output_len):
    """vLLM 0.26.0's `vllm bench serve` (its own module, as the CLI calls it): random prompts of input_len tokens on
    /v1/completions, output_len tokens (ignore_eos, greedy), 4 x concurrency prompts under --max-concurrency, after
    its own warm-up of `concurrency` requests."""
    from vllm.benchmarks.serve import add_cli_args, main as bench_serve_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    argv = ["--backend", "openai", "--base-url", URL, "--endpoint", "/v1/completions", "--model", model,
            "--tokenizer", FOLDER, "--dataset-name", "random", "--random-input-len", str(input_len),
            "--random-output-len", str(output_len), "--ignore-eos", "--temperature", "0",
            "--max-concurrency", str(concurrency), "--num-prompts", str(max(4 * concurrency, 8)),
            "--num-warmups", str(concurrency), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--metric-percentiles", "50,90,99", "--disable-tqdm", "--seed", str(concurrency)]
    os.environ["OPENAI_API_KEY"] = key or "none"
    t = time.time()
    result = bench_serve_main(parser.parse_args(argv))
    keep = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
            "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
            "spec_decode_acceptance_rate")
    out = dict((k, result.get(k)) for k in keep)
    out.update((k, v) for k, v in result.items() if k.endswith("_ms"))
    out.update(concurrency=concurrency, input_len=input_len, output_len=output_len,
               num_prompts=max(4 * concurrency, 8), warmups=concurrency, seconds=round(time.time() - t, 1),
               command="vllm bench serve " + " ".join(argv))
    return out


def left():
    return BUDGET_S - (time.time() - T0)


def engine_env():
    """The environment that picks the engine: ENGINE=trimmed sets VLLM_USE_DEEP_GEMM=0 and VLLM_USE_FLASHINFER_SAMPLER=0
    (what the bundle without tests/gpu/carry.sh engine needs), served leaves vLLM's defaults and puts nvcc on PATH
    (DeepGEMM and flashinfer compile their kernels with it), auto takes served where the bundle holds DeepGEMM's
    headers and flashinfer."""
    engine = os.environ.get("ENGINE", "auto")
    if engine == "auto":
        has = os.path.isdir(os.path.join(SITE, "vllm", "third_party", "deep_gemm", "include")) and os.path.isdir(
            os.path.join(SITE, "flashinfer"))
        engine = "served" if has else "trimmed"
    if engine == "trimmed":
        return engine, {"VLLM_USE_DEEP_GEMM": "0", "VLLM_USE_FLASHINFER_SAMPLER": "0"}
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    return engine, {"PATH": os.path.join(cuda, "bin") + ":" + os.environ.get("PATH", "")}


def serve(argv, env_extra, name):
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError
    env = dict(os.environ, PYTHONPATH=SITE + ":" + os.environ.get("PYTHONPATH", ""), HF_HUB_OFFLINE="1",
               **dict(engine_env()[1], **env_extra))
    logf = open(os.path.join(OUT, "vllm-%s.log" % name), "w")  # noqa: SIM115  closed by stop()
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main"] + argv[1:], env=env, stdout=logf,
                            stderr=subprocess.STDOUT)
    probe = Client(URL, "", "", timeout=5)
    while time.time() - start < float(os.environ.get("HEALTH_TIMEOUT", "330")):
        if proc.poll() is not None:
            raise SystemExit("vLLM exited %s before it was healthy; see vllm-%s.log" % (proc.returncode, name))
        try:
            probe.get_text("/health", timeout=5)
            break
        except EndpointError:
            time.sleep(2)
    else:
        proc.kill()
        raise SystemExit("vLLM not healthy in time")
    return proc, logf, round(time.time() - start, 1)


def stop(proc, logf):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    logf.close()


def save(out, name):
    with open(os.path.join(OUT, "%s.json" % name), "w") as f:
        json.dump(out, f, indent=1)


def measure(out, name, client, key):
    """bench's rows, warm and repeated, then vllm bench serve beside them, then prefill and reuse; nothing new
    starts once BUDGET_S is spent (what is left out is listed in `skipped`)."""
    from ansible_collections.gpuserve.llm.plugins.module_utils import bench
    b = bench.Bench(client, BENCH, log=log)
    b._stream([{"role": "user", "content": "Warm up."}], 8)
    res = out["bench"] = {"decode": [], "prefill": [], "reuse": None, "options": dict(BENCH, temperatures=TEMPERATURES)}
    out["skipped"] = []
    t = time.time()
    sampling = dict(bench.GREEDY)
    for temperature in TEMPERATURES:
        # bench samples greedily (bench.GREEDY, under every request it sends): here at the row's temperature
        bench.GREEDY = dict(sampling, temperature=temperature)
        for kind in BENCH["kinds"]:
            for n in BENCH["concurrency"]:
                if left() < 30:
                    out["skipped"].append("decode %s x%d at temperature %s" % (kind, n, temperature))
                    continue
                before = client.metrics()
                row = b.decode(kind, n)
                after = client.metrics()
                row["temperature"] = temperature
                # vLLM's draft counters over the whole row (its warm-up pass and its timed passes)
                spec = dict((k, int(engines.prom_total(after, m) - engines.prom_total(before, m)))
                            for k, m in SPEC_COUNTERS.items())
                if spec["drafts"] or spec["draft_tokens"]:
                    spec["acceptance"] = round(spec["accepted_tokens"] / float(max(1, spec["draft_tokens"])), 4)
                    row["spec_decode_row"] = spec
                res["decode"].append(row)
                log("decode %s x%d at temperature %s: %s tok/s %s, warm-up %s, drafts %s"
                    % (kind, n, temperature, row["aggregate_tok_s"], row["range"]["aggregate_tok_s"],
                       row["warmup"]["aggregate_tok_s"], row.get("spec_decode_row", "-")))
                save(out, name)
    bench.GREEDY = sampling
    if "structured" in BENCH["kinds"] and left() > 20:
        # What a structured reply held (untimed): whether the grammar applied from its first token (a JSON object
        # in content) or the reply went to the reasoning field (a reasoning parser that saw no end of thinking).
        from ansible_collections.gpuserve.llm.plugins.module_utils import prompts
        s = b._stream([{"role": "user", "content": prompts.decode_prompt("structured", 10 ** 6)}], 64,
                      response_format={"type": "json_schema", "json_schema": {
                          "name": "article", "schema": prompts.ARTICLE_SCHEMA}})
        out["structured_sample"] = {"content": s["text"][:400], "reasoning": s["reasoning"][:400],
                                    "finish_reason": s["finish_reason"], "chunks": s["chunks"], "usage": s["usage"]}
        log("structured sample: %s" % json.dumps(out["structured_sample"])[:600])
    prose = [r for r in res["decode"] if r["kind"] == "prose" and r.get("mean_prompt_tokens")]
    input_len = int(round(prose[0]["mean_prompt_tokens"])) if prose else 64
    out["vllm_bench"] = []
    for c in SIDE:
        if left() < 40:
            out["skipped"].append("vllm bench serve x%d" % c)
            continue
        log("vllm bench serve x%d (random prompts of %d tokens, %d out)" % (c, input_len, BENCH["reply_tokens"]))
        try:
            out["vllm_bench"].append(vllm_bench_serve(out["served_as"], key, c, input_len, BENCH["reply_tokens"]))
        except Exception as e:  # noqa: BLE001  the side-by-side is a measurement; bench's rows stand without it
            out["vllm_bench"].append({"concurrency": c, "error": "%s: %s" % (type(e).__name__, e)})
        log("vllm bench serve x%d: %s" % (c, {k: out["vllm_bench"][-1].get(k) for k in (
            "output_throughput", "median_ttft_ms", "median_tpot_ms", "error")}))
        save(out, name)
    for size in BENCH["prefill_sizes"]:
        if left() < 20:
            out["skipped"].append("prefill %d" % size)
            continue
        res["prefill"].append(b.prefill(size))
        save(out, name)
    if os.environ.get("REUSE", "1") != "1":
        pass
    elif left() > 30:
        res["reuse"] = b.reuse()
        save(out, name)
    else:
        out["skipped"].append("prompt reuse")
    out["bench_seconds"] = round(time.time() - t, 1)
    log("bench %s s; left out: %s" % (out["bench_seconds"], out["skipped"] or "nothing"))


def run(mode):
    sys.path.insert(0, "/root/pydeps")
    if SITE not in sys.path:
        sys.path.append(SITE)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import jsonschema  # noqa: F401  verify's schema checks
    except ImportError:
        # the host wheelhouse (tests/gpu/carry.sh preflight) holds jsonschema and its needs
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
                               os.path.join(os.environ.get("CARRY_DIR", os.path.join(ROOT, ".whl")), "host"),
                               "--target", "/root/pydeps", "jsonschema"])
    from ansible_collections.gpuserve.llm.plugins.module_utils import verify
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client
    if mode == "designed":
        config, written = make_designed_folder()
    else:
        config, written = make_folder(), None
    name = os.environ.get("NAME") or mode + ("-drop-" + "-".join(f.lstrip("-") for f in DROP) if DROP else "")
    out = {"mode": mode, "name": name, "layers": config["num_hidden_layers"], "dropped": DROP,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "active": bound.config_bytes(config), "written": written}
    import vllm
    out["vllm"] = vllm.__version__
    if mode == "defaults":
        out["bandwidth"] = copy_bandwidth()
        log("copy bandwidth %s GB/s" % out["bandwidth"]["gb_s"])
        argv = ["vllm", "serve", FOLDER, "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(PORT)]
        env, model, key = {}, FOLDER, ""
    else:
        settings = settings_recipe()
        settings["llm_drafter"] = {"recipe-no-mtp": "off", "recipe-mtp": "mtp", "recipe-ngram": "ngram"}.get(
            mode, settings["llm_drafter"])
        out["llm_parallel"] = settings["llm_parallel"]
        weights = {"model_dir": DESIGNED if mode == "designed" else FOLDER, "dummy": mode != "designed"}
        with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
            rendered = engines.render(f.read(), engines.command_context(
                settings, weights, {"gpu_memory_total_mib": gpu_memory_mib()}), {"llm_api_key": KEY})
        argv, env, key = drop_flags(rendered["argv"], DROP), rendered["env"], KEY
        model = settings["llm_served_model_name"]
        out["parsed"] = check_args(argv)
        log("vLLM's parser took the rendered command: %s" % json.dumps(out["parsed"]))
    argv = argv + ADD
    out["engine"], out["engine_env"] = engine_env()
    out["command"] = " ".join(argv)
    out["served_as"] = model
    proc, logf, out["healthy_after_s"] = serve(argv, env, name)
    log("healthy after %s s" % out["healthy_after_s"])
    out["chosen"] = chosen(os.path.join(OUT, "vllm-%s.log" % name))
    log("vLLM chose: %s" % json.dumps(out["chosen"]))
    try:
        client = Client(URL, key, model, timeout=900)
        if mode != "designed":
            measure(out, name, client, key)
        if mode in ("recipe-mtp", "designed") and os.environ.get("VERIFY", "0" if mode != "designed" else "1") == "1":
            opts = dict(drafter="mtp", undrafted_how="", dummy=True, vision=False, exact_prompts=16,
                        exact_max_tokens=64, long_prompts=2, long_prompt_tokens=8192, long_max_tokens=32,
                        tool_calls=20, tool_max_tokens=256, json_instruction=10, json_response_format=20,
                        json_max_tokens=256, needle_sizes=[8192, 32768], needle_depths=[0.1, 0.5, 0.9],
                        needle_max_tokens=32, burst_size=16, bursts=2,
                        undrafted_missing="one H200 holds the recipe's engine (60 GiB KV cap) and no second one: "
                                          "vLLM cannot turn MTP off per request")
            t = time.time()
            checks, _hashes = verify.Verifier(client, opts, None, log=log).run(verify.CHECKS, {})
            out["verify"] = checks
            out["verify_seconds"] = round(time.time() - t, 1)
            log("verify %s s: %s" % (out["verify_seconds"], [(c["name"], c["status"], c["passed"], c["total"])
                                                             for c in checks]))
        out["metrics_tail"] = [line for line in client.metrics().splitlines()
                               if line.startswith(("vllm:spec_decode", "vllm:prefix_cache", "vllm:num_preemptions"))]
    finally:
        stop(proc, logf)
        out["chosen"] = chosen(os.path.join(OUT, "vllm-%s.log" % name)) or out.get("chosen")
        save(out, name)
        if mode == "designed" and out.get("verify"):
            with open(os.path.join(OUT, "designed.md"), "w") as f:
                f.write(designed_report(out))


def designed_report(r):
    """verify against the recipe's command on the hand-set weights, and MTP's acceptance meanwhile."""
    accepted, drafted = engines.draft_counts("", "\n".join(r["metrics_tail"]))
    lines = ["# vLLM %s on one H200: the recipe's command on hand-set weights" % r["vllm"], "",
             "%s · the burn-in GLM-4.5-Air-shaped folder cut to %d layers + the MTP layer, bf16, with "
             "`dummy_hf_weights`' model.safetensors (%.1f GB long, %.1f MB on disk, written in %s s) · "
             "`tests/gpu/bench_recipe_vs_defaults.py OUT designed`." % (
                 r["date"], r["layers"], r["written"]["bytes"] / 1e9, r["written"]["on_disk"] / 1e6,
                 r["written"]["seconds"]), "",
             "- healthy in %s s: `%s`" % (r["healthy_after_s"], r["command"]), ""] + verify_table(r["verify"])
    lines += ["", "MTP over the verify run (vLLM's counters): %d of %d drafted tokens accepted." % (accepted, drafted)]
    return "\n".join(lines) + "\n"


def verify_table(checks):
    lines = ["| Check | Result | Score | How |", "|---|---|---|---|"]
    for c in checks:
        score = "%d/%d" % (c["passed"], c["total"]) if c["total"] else "-"
        lines.append("| %s | %s | %s | %s |" % (c["title"], c["status"], score, c["why"].replace("|", "/")))
        for e in c["examples"][:1]:
            lines.append("| | | | e.g. %s |" % e.replace("|", "/")[:200])
    return lines


def fmt(v, unit=""):
    return "-" if v is None else ("{:,}".format(v) + unit)


def med(row, key, unit=""):
    """A median with the passes' range beside, where they differ."""
    span = (row.get("range") or {}).get(key)
    extra = " (%s-%s)" % ("{:,}".format(span[0]), "{:,}".format(span[1])) if span and span[0] != span[1] else ""
    return fmt(row.get(key), unit) + extra


def per_request(row):
    """The client's per-request tok/s and TTFT (median, range), or the engine's (marked e: the median over the
    passes of vLLM's histogram means) where the stream held no text to time."""
    eng, span = row["engine"], row.get("engine_range") or {}

    def e(key, unit=""):
        if not eng.get(key):
            return "-"
        s = span.get(key)
        return "e " + fmt(round(eng[key], 1), unit) + (" (%s-%s)" % (round(s[0], 1), round(s[1], 1))
                                                       if s and s[0] != s[1] else "")
    tok = med(row, "per_request_tok_s") if row["per_request_tok_s"] is not None else e("decode_tok_s")
    ttft = med(row, "ttft_ms", " ms") if row["ttft_ms"] is not None else e("ttft_ms", " ms")
    return tok, ttft


def warm_ttft(row):
    w = row.get("warmup") or {}
    v = w.get("ttft_ms")
    if v is None and (w.get("engine") or {}).get("ttft_ms"):
        return "e " + fmt(round(w["engine"]["ttft_ms"], 1), " ms")
    return fmt(v, " ms")


def verdicts(base, other, limit):
    """Item 2 of issue 27: for each kind and concurrency up to `limit`, is other's median aggregate tok/s at least
    base's median minus the spread (the wider of the two rows' min-max ranges)?"""
    rows = []
    for x, y in zip(base["bench"]["decode"], other["bench"]["decode"]):
        if x["requests"] > limit or x["kind"] != y["kind"] or x["requests"] != y["requests"]:
            continue
        rx, ry = x["range"]["aggregate_tok_s"], y["range"]["aggregate_tok_s"]
        width = max(rx[1] - rx[0], ry[1] - ry[0])
        ok = y["aggregate_tok_s"] >= x["aggregate_tok_s"] - width
        rows.append((x["kind"], x["requests"], x["aggregate_tok_s"], y["aggregate_tok_s"], round(width, 1),
                     round(100.0 * (y["aggregate_tok_s"] / x["aggregate_tok_s"] - 1), 1), ok))
    return rows


def report(paths):
    runs = [json.load(open(p)) for p in paths]
    a = runs[0]
    names = [r["name"] for r in runs]
    opts = a["bench"]["options"]
    bw = a["bandwidth"]["gb_s"] * 1e9
    active = a["active"]["bytes"]
    lines = ["# vLLM %s on one H200: bench you can trust, the recipe's command against vLLM's defaults" % a["vllm"], "",
             "%s · the burn-in GLM-4.5-Air-shaped folder (%d layers + the MTP layer, FP8 block-quantized, "
             "`--load-format dummy`: random weights) · `tests/gpu/bench_recipe_vs_defaults.py`." % (
                 a["date"], a["layers"]),
             "", "Every row: a warm-up pass at the row's own shape (concurrency and kind, %d-token replies; a cold "
             "prompt of the size; a whole conversation), not timed, then %d timed passes, each with prompts of its "
             "own. "
             "Figures: the median of the passes, (lowest-highest) beside where they differ." % (
                 opts["reply_tokens"], opts["repeats"]), ""]
    for r in runs:
        lines.append("- **%s** (healthy in %s s): `%s`" % (r["name"], r["healthy_after_s"], r["command"]))
    lines += ["", "Memory-bandwidth bound for one request: %.2f GB of weights read a token (%s) over %.0f GB/s of "
              "measured device-to-device copy bandwidth = **%.0f tok/s**." % (
                  active / 1e9, ", ".join("%s %.2f" % (k, v / 1e9) for k, v in a["active"]["parts"].items()),
                  bw / 1e9, bw / active), "", "## What vLLM chose (its log)", "",
              "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(runs)]
    for key in ("fp8_linear_kernel", "attention_backend", "moe_backend", "moe_config", "sampler", "kv_cache_dtype",
                "cudagraph_mode", "cudagraph_sizes", "max_num_batched_tokens", "kv_cache_memory", "kv_cache_tokens",
                "max_concurrency", "engine_init"):
        cells = " | ".join(str(r.get("chosen", {}).get(key, "-")) for r in runs)
        lines.append("| %s | %s |" % (key.replace("_", " "), cells))
    lines += ["", "## Decode", "", "Aggregate tok/s, median per-request tok/s, median TTFT; the warm-up pass's TTFT "
              "(what a cold engine gave). `e` = the engine's own figure (vLLM's inter-token latency and TTFT "
              "histograms over the pass): the prose and code replies of random weights are token ids the burn-in "
              "tokenizer has no text for, so the stream has nothing to time.", "",
              "| Requests | Kind | " + " | ".join("%s tok/s | per request | TTFT | warm-up TTFT" % n for n in names)
              + " |", "|---|---|" + "---|---|---|---|" * len(runs)]
    for i, row in enumerate(a["bench"]["decode"]):
        cells = []
        for r in runs:
            rows = r["bench"]["decode"]
            if i >= len(rows):
                cells += ["-"] * 4
                continue
            x = rows[i]
            cells += [med(x, "aggregate_tok_s")] + list(per_request(x)) + [warm_ttft(x)]
        lines.append("| %d | %s | %s |" % (row["requests"], row["kind"], " | ".join(cells)))
    limit = max([r.get("llm_parallel") or 0 for r in runs] + [0])
    for r in runs[1:]:
        if r["mode"] == "defaults" or a["mode"] != "defaults":
            continue
        rows = verdicts(a, r, limit)
        fails = [x for x in rows if not x[6]]
        lines += ["", "### %s against %s, up to %d requests (llm_parallel)" % (r["name"], a["name"], limit), "",
                  "Does %s's median aggregate tok/s reach %s's median minus the spread (the wider of the two rows' "
                  "min-max ranges)? %d of %d rows do." % (r["name"], a["name"], len(rows) - len(fails), len(rows)), "",
                  "| Kind | Requests | %s | %s | spread | change | verdict |" % (a["name"], r["name"]),
                  "|---|---|---|---|---|---|---|"]
        for kind, n, x, y, width, change, ok in rows:
            cells = (kind, n, fmt(x), fmt(y), fmt(width), change, "ok" if ok else "**below**")
            lines.append("| %s | %d | %s | %s | %s | %+.1f %% | %s |" % cells)
    side = [r for r in runs if r.get("vllm_bench")]
    if side:
        lines += ["", "## bench beside `vllm bench serve` (vLLM 0.26.0's own), the same server", "",
                  "bench: chat completions, its prose prompts, one burst of N requests a pass, median of the passes. "
                  "vllm bench serve: /v1/completions, random token prompts as long as bench's prose prompts, the same "
                  "reply length, greedy, ignore_eos, 4N prompts kept N at a time (`--max-concurrency`), after its own "
                  "warm-up of N requests (`--num-warmups`: the first prompt N times). Its tok/s is output tokens over "
                  "the whole run; its per-request figure is 1000 / median TPOT.", "",
                  "| Server | N | bench tok/s | vllm bench tok/s | bench per request | vllm bench per request | "
                  "bench TTFT | vllm bench TTFT median / p99 | prompt tokens bench / vllm bench |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in side:
            for v in r["vllm_bench"]:
                ours = [x for x in r["bench"]["decode"] if x["kind"] == "prose" and x["requests"] == v["concurrency"]]
                if v.get("error"):
                    lines.append("| %s | %d | | failed: %s | | | | | |" % (
                        r["name"], v["concurrency"], v["error"][:120]))
                    continue
                x = ours[0] if ours else None
                tok, ttft = per_request(x) if x else ("-", "-")
                lines.append("| %s | %d | %s | %s | %s | %s | %s | %s / %s ms | %s / %s |" % (
                    r["name"], v["concurrency"], med(x, "aggregate_tok_s") if x else "-",
                    fmt(round(v["output_throughput"], 1)), tok,
                    fmt(round(1000.0 / v["median_tpot_ms"], 1)) if v.get("median_tpot_ms") else "-", ttft,
                    fmt(round(v["median_ttft_ms"], 1)), fmt(round(v.get("p99_ttft_ms") or 0, 1)),
                    fmt(x.get("mean_prompt_tokens")) if x else "-",
                    fmt(round(v["total_input_tokens"] / max(1, v["completed"]), 1))))
    lines += ["", "## Prefill (cold prompts)", "",
              "| Prompt | " + " | ".join("%s tok/s | first token" % n for n in names) + " |",
              "|---|" + "---|---|" * len(runs)]
    for i, row in enumerate(a["bench"]["prefill"]):
        cells = []
        for r in runs:
            p = r["bench"]["prefill"]
            cells += [med(p[i], "prefill_tok_s"), med(p[i], "ttft_s", " s")] if i < len(p) else ["-", "-"]
        lines.append("| %s tokens | %s |" % (fmt(row["prompt_tokens"]), " | ".join(cells)))
    if any(r["bench"].get("reuse") for r in runs):
        lines += ["", "## Prompt reuse (a 32K-token conversation, turns 2-5)", "", "| | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(runs)]
        for key, label in (("first_time_s", "first turn"), ("next_time_s", "next turns (median)"),
                           ("matched_cold_s", "a cold prompt as long as the last turn")):
            cells = [med(r["bench"]["reuse"], key, " s") if r["bench"].get("reuse") else "-" for r in runs]
            lines.append("| %s | %s |" % (label, " | ".join(cells)))
    for r in runs:
        accept = [x["engine"]["draft_acceptance"] for x in r["bench"]["decode"] if "draft_acceptance" in x["engine"]]
        if accept:
            lines += ["", "%s: draft acceptance reported by vLLM over the decode rows: %s to %s." % (
                r["name"], min(accept), max(accept))]
        if r.get("skipped"):
            lines += ["", "%s: left out for time: %s." % (r["name"], ", ".join(r["skipped"]))]
    for r in runs:
        if r.get("verify"):
            lines += ["", "## Verify against the %s server" % r["name"], ""] + verify_table(r["verify"])
    return "\n".join(lines) + "\n"


if __name__ != "__main__":
    pass
elif MODE == "report" and [json.load(open(p))["mode"] for p in sys.argv[3:]] == ["designed"]:
    with open(os.path.join(OUT, "designed.md"), "w") as f:
        f.write(designed_report(json.load(open(sys.argv[3]))))
elif MODE == "report":
    text = report(sys.argv[3:])
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(text)
    print(text)
else:
    run(MODE)
