"""On a GPU machine with vLLM importable (docs/engines.md): make the burn-in GLM model folder with the
weights stage's own code (plugins/module_utils/dummy_hf.py, templates/chat/glm45.jinja), render the
service's vLLM command from the example recipe's settings for a text model (templates/vllm.j2: fp8
KV, MTP drafting, GLM tool and reasoning parsers, xgrammar, thinking off, top_k 20, API key), serve it
with `--load-format dummy`, and put requests to it. Writes vllm.log and results.json to OUTDIR.

    python3 tests/gpu/serve_dummy_glm.py OUTDIR [VLLM_SITE=/root/vllm/site]

VARIANTS (env, comma-separated, in order): fp8-checkpoint (the folder the weights stage makes for
GLM-4.6V-FP8) and bf16-quantized-at-load (a bf16 folder, --quantization fp8).
"""
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf, engines  # noqa: E402

OUT = sys.argv[1]
SITE = sys.argv[2] if len(sys.argv) > 2 else "/root/vllm/site"
LAYERS = int(os.environ.get("LAYERS", "8"))
KEY = "sk-gpu-burn-in"
PORT = 8020
URL = "http://127.0.0.1:%d" % PORT
os.makedirs(OUT, exist_ok=True)
results = {"layers": LAYERS, "variants": []}


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return yaml.safe_load(f)


def call(path, body=None, key=KEY, timeout=300):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    req = urllib.request.Request(URL + path, data=json.dumps(body).encode() if body is not None else None,
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if text[:1] in ("{", "[") else text)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()[:500]
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)


def gpu_memory_mib():
    import pynvml
    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total // (1024 * 1024))


def checks():
    out = {}
    status, body = call("/v1/models")
    out["models"] = {"status": status, "ids": [m["id"] for m in body["data"]] if status == 200 else body}
    out["no_key_status"] = call("/v1/models", key="")[0]
    t = time.time()
    status, body = call("/v1/chat/completions", {"model": "glm-4.6v", "messages": [
        {"role": "user", "content": "Say hello."}], "max_tokens": 32, "temperature": 0})
    out["chat"] = {"status": status, "seconds": round(time.time() - t, 2),
                   "message": body["choices"][0]["message"] if status == 200 else body,
                   "usage": body.get("usage") if status == 200 else None}
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer"}}, "required": ["name", "age"],
              "additionalProperties": False}
    status, body = call("/v1/chat/completions", {
        "model": "glm-4.6v", "messages": [{"role": "user", "content": "A person as JSON."}], "max_tokens": 200,
        "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}})
    entry = {"status": status}
    if status == 200:
        content = body["choices"][0]["message"]["content"]
        entry["content"] = content
        try:
            value = json.loads(content)
            entry["validates"] = (isinstance(value, dict) and set(value) == {"name", "age"}
                                  and isinstance(value["name"], str) and isinstance(value["age"], int))
        except ValueError as e:
            entry["validates"] = False
            entry["error"] = str(e)
    else:
        entry["body"] = body
    out["json_schema"] = entry
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"],
        "additionalProperties": False}}}]
    for choice in ("required", "auto"):
        status, body = call("/v1/chat/completions", {
            "model": "glm-4.6v", "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 200,
            "temperature": 0, "tools": tools, "tool_choice": choice})
        entry = {"status": status}
        if status == 200:
            message = body["choices"][0]["message"]
            calls = message.get("tool_calls") or []
            entry["finish_reason"] = body["choices"][0]["finish_reason"]
            entry["tool_calls"] = [c["function"] for c in calls]
            parsed = []
            for c in calls:
                try:
                    parsed.append(json.loads(c["function"]["arguments"]))
                except ValueError:
                    parsed.append(None)
            entry["arguments_parse"] = bool(calls) and all(isinstance(p, dict) and "city" in p for p in parsed)
            entry["content"] = (message.get("content") or "")[:200]
        else:
            entry["body"] = body
        out["tools_" + choice] = entry
    status, text = call("/metrics")
    out["pool"] = engines.pool_vllm_metrics(text) if status == 200 else None
    return out


def serve(name, overrides, settings_change):
    folder = "/root/glm-dummy-" + name
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(ROOT, "templates", "chat", "glm45.jinja")) as f:
        template = f.read()
    for fname, text in dummy_hf.folder_files(template, "glm4_moe", LAYERS, overrides).items():
        with open(os.path.join(folder, fname), "w") as f:
            f.write(text)
    defaults = dict((k, v) for k, v in load("roles/llm/defaults/main.yml").items() if "{{" not in str(v))
    settings = dict(defaults, **load("inventories/example/group_vars/llm_hosts/settings.yml"))
    settings.update(llm_vision=False, llm_weights="dummy", llm_gpus=[0], llm_api_key=KEY, llm_parallel=16,
                    llm_context=32768, llm_max_tokens=4096, llm_host="127.0.0.1", llm_port=PORT,
                    llm_model_dense="fp8")
    settings.update(settings_change)
    with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
        vllm_template = f.read()
    ctx = engines.command_context(settings, {"model_dir": folder, "dummy": True},
                                  {"gpu_memory_total_mib": gpu_memory_mib()})
    rendered = engines.render(vllm_template, ctx, {"llm_api_key": KEY})
    argv = rendered["argv"]
    assert argv[:2] == ["vllm", "serve"], argv[:2]
    entry = {"name": name, "command": rendered["display"], "config_overrides": overrides}
    env = dict(os.environ, PYTHONPATH=SITE, VLLM_USE_FLASHINFER_SAMPLER="0", HF_HUB_OFFLINE="1", **rendered["env"])
    # The vLLM folder carried to the GPU machine leaves out DeepGEMM's headers, which block-FP8 GEMMs JIT-compile
    # on sm90 by default: NO_DEEP_GEMM=1 makes vLLM take its other block-FP8 kernels (the bundle's limit,
    # not the collection's command; a vLLM image has them).
    if os.environ.get("NO_DEEP_GEMM") == "1":
        env["VLLM_USE_DEEP_GEMM"] = "0"
        entry["env"] = {"VLLM_USE_DEEP_GEMM": "0"}
    log = open(os.path.join(OUT, "vllm-%s.log" % name), "w")
    start = time.time()
    proc = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.cli.main", "serve"] + argv[2:],
                            env=env, stdout=log, stderr=subprocess.STDOUT)
    healthy = False
    while time.time() - start < float(os.environ.get("HEALTH_TIMEOUT", "330")):
        if proc.poll() is not None:
            break
        if call("/health", key="", timeout=5)[0] == 200:
            healthy = True
            break
        time.sleep(2)
    entry["healthy"] = healthy
    entry["seconds_to_healthy"] = round(time.time() - start, 1)
    entry["exit_code"] = proc.poll()
    if healthy:
        entry["checks"] = checks()
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()
    results["variants"].append(entry)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("%s: healthy=%s in %.0f s" % (name, healthy, entry["seconds_to_healthy"]), flush=True)
    return healthy


weights = load("roles/weights/defaults/main.yml")
for variant in os.environ.get("VARIANTS", "fp8-checkpoint,bf16-quantized-at-load").split(","):
    if variant == "fp8-checkpoint":
        serve(variant, weights["weights_fp8_quantization"], {})
    elif variant == "bf16-quantized-at-load":
        serve(variant, {}, {"llm_model_dense": "bf16"})
print(json.dumps(results, indent=1)[:6000])
