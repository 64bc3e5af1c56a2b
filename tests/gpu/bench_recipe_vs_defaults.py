"""Issue 13 on a GPU machine with vLLM importable (docs/engines.md): the burn-in GLM-4.5-Air-shaped folder
(the weights stage's own code, FP8 block-quantized as for GLM-4.6V-FP8, 8 layers + the MTP layer), served
two ways, one per call, and measured with the bench and verify code the playbooks run on a host:

    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR defaults [SITE]   # vllm serve FOLDER --load-format dummy
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR recipe [SITE]     # templates/vllm.j2, the recipe's settings
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR recipe-no-mtp [SITE]  # the same with llm_drafter: off
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR designed [SITE]   # the recipe on hand-set weights: verify
    python3 tests/gpu/bench_recipe_vs_defaults.py OUTDIR report A.json B.json ...  # side by side (no GPU)

The recipe run first puts the rendered command through vLLM's own argument parser. The defaults run
first measures the GPU's copy bandwidth (PyTorch, device to device) for the memory-bandwidth bound.
The designed run serves the same folder shape (2 layers + MTP, bf16) with dummy_hf_weights' hand-set
model.safetensors instead of random weights, and runs verify only: grammar-constrained replies close,
and the MTP layer agrees with its model.
"""
import json
import os
import subprocess
import sys
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf, dummy_hf_weights, engines  # noqa: E402

OUT, MODE = sys.argv[1], sys.argv[2]
SITE = sys.argv[3] if len(sys.argv) > 3 and MODE != "report" else "/root/vllm/site"
LAYERS = int(os.environ.get("LAYERS", "8"))
KEY = "sk-gpu-recipe"
PORT = 8020
URL = "http://127.0.0.1:%d" % PORT
FOLDER = "/root/glm-dummy-fp8"
DESIGNED = "/root/glm-designed"
BENCH = {"concurrency": [1, 4, 16, 64], "kinds": ["prose", "structured", "code"], "reply_tokens": 400,
         "ignore_eos": True, "prefill_sizes": [2048, 8192, 32768], "prefill_reply_tokens": 8,
         "reuse_tokens": 32768, "reuse_turns": 5}
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


def active_bytes_per_token(c):
    """Bytes of weights one decoded token reads: attention, the dense MLPs, the shared expert and the top-k
    routed experts of every layer, the router, and the output head (FP8 linear layers 1 byte a weight, the
    rest bf16). The embedding row and norms are negligible. The MTP layer is not counted (a drafted step
    reads it on top)."""
    h, heads, kv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c.get("head_dim") or 128
    fp8 = 1 if c.get("quantization_config") else 2
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    dense = 3 * h * c["intermediate_size"]
    expert = 3 * h * c["moe_intermediate_size"]
    k_dense = c.get("first_k_dense_replace", 1)
    per_moe = expert * (c["num_experts_per_tok"] + c.get("n_shared_experts", 1))
    linear = c["num_hidden_layers"] * attn + k_dense * dense + (c["num_hidden_layers"] - k_dense) * per_moe
    router = (c["num_hidden_layers"] - k_dense) * h * c["n_routed_experts"] * 2
    head = h * c["vocab_size"] * 2
    # Dense MLPs stay bf16 in the burn-in FP8 folder (dummy_hf: modules_to_not_convert).
    dense_bf16 = k_dense * dense * (2 - fp8)
    return {"bytes": int(linear * fp8 + dense_bf16 + router + head),
            "parts": {"attention": num(c["num_hidden_layers"] * attn * fp8), "dense_mlp": num(k_dense * dense * 2),
                      "experts": num((c["num_hidden_layers"] - k_dense) * per_moe * fp8), "router": num(router),
                      "lm_head": num(head)}}


def num(v):
    return int(v)


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
    settings.update(llm_vision=False, llm_weights="dummy", llm_gpus=[0], llm_api_key=KEY, llm_host="127.0.0.1",
                    llm_port=PORT, llm_model_dense="fp8")
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


def serve(argv, env_extra, name):
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError
    env = dict(os.environ, PYTHONPATH=SITE + ":" + os.environ.get("PYTHONPATH", ""), VLLM_USE_FLASHINFER_SAMPLER="0",
               HF_HUB_OFFLINE="1", VLLM_USE_DEEP_GEMM="0", **env_extra)
    logf = open(os.path.join(OUT, "vllm-%s.log" % name), "w")
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


def run(mode):
    sys.path.insert(0, "/root/pydeps")
    try:
        import jsonschema  # noqa: F401  verify's schema checks
    except ImportError:
        # the host wheelhouse (tests/gpu/carry.sh preflight) holds jsonschema and its needs
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
                               os.path.join(os.environ.get("CARRY_DIR", os.path.join(ROOT, ".whl")), "host"),
                               "--target", "/root/pydeps", "jsonschema"])
    from ansible_collections.gpuserve.llm.plugins.module_utils import bench, verify
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client
    if mode == "designed":
        config, written = make_designed_folder()
    else:
        config, written = make_folder(), None
    out = {"mode": mode, "layers": config["num_hidden_layers"], "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "active": active_bytes_per_token(config), "written": written}
    import vllm
    out["vllm"] = vllm.__version__
    if mode == "defaults":
        out["bandwidth"] = copy_bandwidth()
        log("copy bandwidth %s GB/s" % out["bandwidth"]["gb_s"])
        argv = ["vllm", "serve", FOLDER, "--load-format", "dummy", "--host", "127.0.0.1", "--port", str(PORT)]
        env, model, key = {}, FOLDER, ""
    else:
        settings = settings_recipe()
        if mode == "recipe-no-mtp":
            settings["llm_drafter"] = "off"
        weights = {"model_dir": DESIGNED, "dummy": False} if mode == "designed" else {"model_dir": FOLDER, "dummy": True}
        with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
            rendered = engines.render(f.read(), engines.command_context(
                settings, weights, {"gpu_memory_total_mib": gpu_memory_mib()}), {"llm_api_key": KEY})
        argv, env, model, key = rendered["argv"], rendered["env"], settings["llm_served_model_name"], KEY
        out["parsed"] = check_args(argv)
        log("vLLM's parser took the rendered command: %s" % json.dumps(out["parsed"]))
    out["command"] = " ".join(argv)
    proc, logf, out["healthy_after_s"] = serve(argv, env, mode)
    log("healthy after %s s" % out["healthy_after_s"])
    try:
        client = Client(URL, key, model, timeout=900)
        if mode != "designed":
            t = time.time()
            out["bench"] = bench.Bench(client, BENCH, log=log).run()
            out["bench_seconds"] = round(time.time() - t, 1)
            log("bench %s s" % out["bench_seconds"])
        if mode in ("recipe", "designed") and os.environ.get("VERIFY", "1") == "1":
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
        with open(os.path.join(OUT, "%s.json" % mode), "w") as f:
            json.dump(out, f, indent=1)
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


def per_request(row):
    """The client's per-request tok/s and TTFT, or the engine's (marked e) where the stream held no text to time."""
    if row["per_request_tok_s"] is not None:
        return fmt(row["per_request_tok_s"]), fmt(row["ttft_ms"], " ms")
    eng = row["engine"]
    return ("e " + fmt(eng.get("decode_tok_s"))) if eng.get("decode_tok_s") else "-", \
        ("e " + fmt(eng.get("ttft_ms"), " ms")) if eng.get("ttft_ms") else "-"


def report(paths):
    runs = [json.load(open(p)) for p in paths]
    a = runs[0]
    names = [r["mode"] for r in runs]
    bw = a["bandwidth"]["gb_s"] * 1e9
    active = a["active"]["bytes"]
    lines = ["# vLLM %s on one H200: the recipe's command against vLLM's defaults" % a["vllm"], "",
             "%s · the burn-in GLM-4.5-Air-shaped folder (%d layers + the MTP layer, FP8 block-quantized, "
             "`--load-format dummy`: random weights) · `tests/gpu/bench_recipe_vs_defaults.py`." % (a["date"], a["layers"]),
             ""]
    for r in runs:
        lines.append("- **%s** (healthy in %s s): `%s`" % (r["mode"], r["healthy_after_s"], r["command"]))
    lines += ["", "Memory-bandwidth bound for one request: %.2f GB of weights read a token (%s) over %.0f GB/s of "
              "measured device-to-device copy bandwidth = **%.0f tok/s**." % (
                  active / 1e9, ", ".join("%s %.2f" % (k, v / 1e9) for k, v in a["active"]["parts"].items()),
                  bw / 1e9, bw / active), "",
              "## Decode", "", "Aggregate tok/s, median per-request tok/s, median TTFT. `e` = the engine's own figure "
              "(vLLM's inter-token latency and TTFT histograms over the row): the prose and code replies of random "
              "weights are token ids the burn-in tokenizer has no text for, so the stream has nothing to time.", "",
              "| Requests | Kind | " + " | ".join("%s tok/s | per request | TTFT" % n for n in names) + " |",
              "|---|---|" + "---|---|---|" * len(runs)]
    for i, row in enumerate(a["bench"]["decode"]):
        cells = []
        for r in runs:
            x = r["bench"]["decode"][i]
            cells += [fmt(x["aggregate_tok_s"])] + list(per_request(x))
        lines.append("| %d | %s | %s |" % (row["requests"], row["kind"], " | ".join(cells)))
    lines += ["", "## Prefill (cold prompts)", "", "| Prompt | " + " | ".join("%s tok/s | first token" % n for n in names)
              + " |", "|---|" + "---|---|" * len(runs)]
    for i, row in enumerate(a["bench"]["prefill"]):
        lines.append("| %s tokens | %s |" % (fmt(row["prompt_tokens"]), " | ".join(
            "%s | %s s" % (fmt(r["bench"]["prefill"][i]["prefill_tok_s"]), r["bench"]["prefill"][i]["ttft_s"]) for r in runs)))
    lines += ["", "## Prompt reuse (a 32K-token conversation, turns 2-5)", "", "| | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(runs)]
    for key, label in (("first_time_s", "first turn"), ("next_time_s", "next turns (median)"),
                       ("matched_cold_s", "a cold prompt as long as the last turn")):
        lines.append("| %s | %s |" % (label, " | ".join("%s s" % r["bench"]["reuse"][key] for r in runs)))
    for r in runs:
        accept = [x["engine"]["draft_acceptance"] for x in r["bench"]["decode"] if "draft_acceptance" in x["engine"]]
        if accept:
            lines += ["", "%s: MTP draft acceptance reported by vLLM over the decode rows: %s to %s." % (
                r["mode"], min(accept), max(accept))]
    for r in runs:
        if r.get("verify"):
            lines += ["", "## Verify against the %s server" % r["mode"], ""] + verify_table(r["verify"])
    return "\n".join(lines) + "\n"


if MODE == "report" and [json.load(open(p))["mode"] for p in sys.argv[3:]] == ["designed"]:
    with open(os.path.join(OUT, "designed.md"), "w") as f:
        f.write(designed_report(json.load(open(sys.argv[3]))))
elif MODE == "report":
    text = report(sys.argv[3:])
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(text)
    print(text)
else:
    run(MODE)
