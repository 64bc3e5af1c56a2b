"""Issue 26 on a GPU machine: the burn-in GLM-4.6V folder (the weights stage's own code: dummy_hf's glm4v_moe
preset, 8 language-model layers, the whole vision tower, FP8 as the stage makes it for GLM-4.6V-FP8) served by
vLLM 0.26.0 with the service template's command for the example recipe with llm_vision: true, and put to
images and video by data URL, media URLs allowed and refused, oversized and corrupt media, verify's media
checks and an image TTFT bench.

    python3 tests/gpu/serve_vision_glm.py OUT processor     # (a) the GLM-4.6V processor: transformers, then vLLM
    python3 tests/gpu/serve_vision_glm.py OUT data-only     # llm_media_urls: data_only (tries llm_drafter: mtp first)
    python3 tests/gpu/serve_vision_glm.py OUT domains       # llm_media_urls: [allowed.test]
    python3 tests/gpu/serve_vision_glm.py OUT refusals      # data_only: what must be refused (after patches/vllm)
    python3 tests/gpu/serve_vision_glm.py OUT dry-refusals  # the refusals run against a stub, no GPU
    python3 tests/gpu/serve_vision_glm.py OUT dry           # the whole data-only run against a stub, no GPU

What it needs there: tests/gpu/RESULTS.md, "Carrying what the scripts need" (tests/gpu/carry.sh vllm).
How it ran (no Docker there; the processes run directly): vLLM 0.26.0 unpacked at /root/vllm/site from that
bundle (xz parts; a device call carries at most 64 MiB with the checkout, so each part travels in a call
of its own and is stashed under /root/stash, back to back, before the machine goes back, and unpack.sh
joins them: the calls below are as run on 2026-12-01 with two 60 MiB parts; carry.sh now makes parts of
<= 40 MiB). This repo travels as a copy beside the part, in the
checkout's ignored .gpucarry/ (device run, carry [".gpucarry"]):

    call 1: mkdir -p /root/stash && cp .gpucarry/vllm-part-00 .gpucarry/SHA256SUMS /root/stash/ &&
            python3 .gpucarry/repo/tests/gpu/serve_vision_glm.py $OUT processor-transformers
    call 2: bash .gpucarry/unpack.sh .gpucarry && python3 .gpucarry/repo/tests/gpu/serve_vision_glm.py $OUT data-only
    call 3: python3 .gpucarry/repo/tests/gpu/serve_vision_glm.py $OUT domains   (the same machine, still warm)

and, after patches/vllm, on a fresh machine: part 00 as in call 1, then part 01 with ansible-core's wheel, the
series applied to /root/vllm/site by the collection's apply_patches module (python3 plugins/modules/apply_patches.py
ARGS.json, ansible-core on PYTHONPATH), then the domains and refusals modes.

DEADLINE (seconds, default 540) makes a mode skip its later parts rather than outrun the call.

refusals (issue 39): every case of plugins/module_utils/bad_media.py (the bad-media catalogue), each followed by
/health and a text chat, around 2026-12-01's cases that must be served; LABEL=patched|unpatched names the files
(refusals-LABEL.json with a "table": case, status, the engine's message, served after). As run on 2026-12-03 with
the vLLM parts of .whl/e1-e3 (tests/gpu/h200-bad-media-2026-12-03/run.sh): the series applied by the collection's
apply_patches, LABEL=patched; then, on the same machine, the two patched files put back, LABEL=unpatched.

Names: /etc/hosts gets allowed.test, refused.test and invalid for 127.0.0.1, where a small HTTP server of this
script answers and logs every request with its Host header: the log, not the reply, tells whether vLLM fetched.
"""
import base64
import http.server
import io
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, ".collections"))
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf, engines, prompts  # noqa: E402

OUT, MODE = sys.argv[1], sys.argv[2]
DRY = MODE.startswith("dry")
SITE = os.environ.get("VLLM_SITE", "/root/vllm/site")
LAYERS = int(os.environ.get("LAYERS", "8"))
KEY = "sk-gpu-vision"
PORT, MEDIA_PORT = 8020, int(os.environ.get("MEDIA_PORT", "8089"))
URL = "http://127.0.0.1:%d" % PORT
FOLDER = "/root/glm46v-dummy" if not DRY else os.path.join(OUT, "glm46v-dummy")
NAMES = ["allowed.test", "refused.test", "invalid"]
os.makedirs(OUT, exist_ok=True)
T0 = time.time()
DEADLINE = float(os.environ.get("DEADLINE", "540"))
# The media server is local: no proxy between vLLM (or this script) and it.
for _proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
    os.environ.pop(_proxy, None)
os.environ["no_proxy"] = os.environ["NO_PROXY"] = "*"


def time_left():
    return DEADLINE - (time.time() - T0)


def log(line):
    print("%6.1f %s" % (time.time() - T0, line), flush=True)


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return yaml.safe_load(f)


def save(name, data):
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(data, f, indent=1, default=str)


# -- the model folder and the command -------------------------------------------------------------

def write_folder():
    with open(os.path.join(ROOT, "templates", "chat", "glm46v.jinja")) as f:
        template = f.read()
    weights = load("roles/weights/defaults/main.yml")
    files = dummy_hf.folder_files(template, "glm4v_moe", LAYERS, weights["weights_fp8_quantization"])
    os.makedirs(FOLDER, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(FOLDER, name), "w") as f:
            f.write(text)
    return json.loads(files["config.json"])


def gpu_memory_mib():
    if DRY:
        return 143771
    import pynvml
    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total // (1024 * 1024))


def render(**changes):
    """The service template's vLLM command for the example recipe on one GPU, with llm_vision: true."""
    defaults = dict((k, v) for k, v in load("roles/llm/defaults/main.yml").items() if "{{" not in str(v))
    settings = dict(defaults, **load("inventories/example/group_vars/llm_hosts/settings.yml"))
    # the engine binds llm_engine_host:llm_engine_port (behind the front since a1cd9a5): the port served here
    settings.update(llm_vision=True, llm_weights="dummy", llm_gpus=[0], llm_api_key=KEY, llm_host="127.0.0.1",
                    llm_port=PORT, llm_engine_host="127.0.0.1", llm_engine_port=PORT, llm_model_dense="fp8")
    settings.update(changes)
    with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
        rendered = engines.render(f.read(), engines.command_context(
            settings, {"model_dir": FOLDER, "dummy": True}, {"gpu_memory_total_mib": gpu_memory_mib()}),
            {"llm_api_key": KEY})
    return settings, rendered


# -- a media server under several names -----------------------------------------------------------

ACCESS = []


class Media(http.server.BaseHTTPRequestHandler):
    files = {}

    def log_message(self, *args):
        pass

    def do_GET(self):
        ACCESS.append({"t": round(time.time() - T0, 2), "host": self.headers.get("Host"), "path": self.path})
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "http://refused.test:%d/red.png" % MEDIA_PORT)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = self.files.get(self.path.split("?")[0])
        self.send_response(200 if data else 404)
        self.send_header("Content-Type", "video/mp4" if self.path.endswith(".mp4") else "image/png")
        self.send_header("Content-Length", str(len(data or b"")))
        self.end_headers()
        self.wfile.write(data or b"")


def start_media_server(files):
    Media.files = files
    if not DRY:
        with open("/etc/hosts", "a") as f:
            f.write("\n127.0.0.1 %s\n" % " ".join(NAMES))
    socketserver.ThreadingTCPServer.allow_reuse_address = True  # a second mode on the same machine
    server = socketserver.ThreadingTCPServer(("0.0.0.0", MEDIA_PORT), Media)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def media_url(host, path):
    return "http://%s:%d%s" % (host, MEDIA_PORT, path)


# -- media ----------------------------------------------------------------------------------------

def png_bytes(array):
    from PIL import Image
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="PNG")
    return buf.getvalue()


def jpeg_photo(seed, width=1024, height=768):
    """A photo-like JPEG (smooth gradients, some noise): what a user sends, ~100-300 KB."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    base = np.stack([(x * rng.uniform(0.1, 0.3) + y * rng.uniform(0.05, 0.2) + rng.uniform(0, 255)) % 256
                     for _c in range(3)], -1)
    img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=85)
    return buf.getvalue()


def mp4(seconds=4, fps=8, size=224):
    """An MP4 (mp4v) made with OpenCV, the reader vLLM uses."""
    import tempfile
    import cv2
    import numpy as np
    fd, path = tempfile.mkstemp(suffix=".mp4")
    os.close(fd)
    writer = cv2.VideoWriter(path, cv2.VideoWriter_fourcc(*"mp4v"), fps, (size, size))
    for i in range(seconds * fps):
        frame = np.zeros((size, size, 3), np.uint8)
        frame[:, :, i % 3] = 40 + 200 * i // (seconds * fps)
        frame[(i * 7) % size:(i * 7) % size + 20, :, :] = 255
        writer.write(frame)
    writer.release()
    with open(path, "rb") as f:
        data = f.read()
    os.unlink(path)
    if len(data) < 1000:
        raise RuntimeError("OpenCV wrote no mp4v video here (%d bytes)" % len(data))
    return data


def big_png(mb=22.5):
    """A noise PNG of about `mb` MB (noise does not compress): its data URL is about 4/3 of that."""
    import numpy as np
    side = int((mb * 1e6 / 3) ** 0.5)
    return png_bytes(np.random.default_rng(7).integers(0, 256, (side, side, 3), dtype=np.uint8)), side


def bomb_png(side=14000):
    """A one-colour PNG of side x side pixels (196 M at 14000), small on the wire; decoded, 588 MB."""
    import struct
    import zlib
    comp = zlib.compressobj(6)
    row = b"\x00" + b"\x50\x90\xd0" * side
    body = b"".join(comp.compress(row) for _r in range(side)) + comp.flush()
    chunk = prompts.png_chunk
    return (prompts.PNG_SIGNATURE + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", body) + chunk(b"IEND", b""))


def image_part(data, mime="image/png"):
    return prompts.image_url_part(data, mime)


def video_part(data, mime="video/mp4"):
    return prompts.video_url_part(data, mime)


# -- requests -------------------------------------------------------------------------------------

def post(parts, text="Describe this.", max_tokens=1, timeout=600, key=KEY):
    """POST one chat; (status, prompt tokens or the error's text, seconds)."""
    content = list(parts) + [{"type": "text", "text": text}]
    body = {"model": "glm-4.6v", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
            "temperature": 0}
    req = urllib.request.Request(URL + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    t = time.time()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            data = json.loads(r.read().decode())
            return r.status, data["usage"]["prompt_tokens"], round(time.time() - t, 3)
    except urllib.error.HTTPError as e:
        return e.code, error_message(e.read().decode("utf-8", "replace"))[:300], round(time.time() - t, 3)
    except (urllib.error.URLError, OSError) as e:
        return None, str(e)[:300], round(time.time() - t, 3)


def error_message(body):
    """The engine's own words: vLLM's {"error": {"message": ...}} (or {"message": ...}), else the body itself."""
    try:
        data = json.loads(body)
        err = data.get("error", data) if isinstance(data, dict) else data
        return str(err.get("message", body) if isinstance(err, dict) else err)
    except ValueError:
        return body


def serving():
    """The engine still answers: /health and a text chat."""
    try:
        with urllib.request.urlopen(URL + "/health", timeout=10) as r:
            health = r.status
    except (urllib.error.URLError, OSError) as e:
        health = str(e)[:100]
    return {"health": health, "chat": post([], "Still there?")[0]}


BASE = {}


def case(results, name, parts, expect, text="Describe this.", check_serving=False, **kw):
    """One request: its status, prompt tokens and the tokens the media added (against the same text alone)."""
    status, detail, seconds = post(parts, text, **kw)
    entry = {"status": status, "seconds": seconds, "expect": expect}
    if status == 200:
        entry["prompt_tokens"] = detail
        if len(text) < 200:
            if text not in BASE:
                BASE[text] = post([], text)[1]
            entry["media_tokens"] = detail - BASE[text]
    else:
        entry["error"] = detail
    if check_serving:
        entry["after"] = serving()
    if expect == "report":
        entry["ok"] = None
    else:
        if expect == "200":
            ok = status == 200
        elif expect == "no-5xx":  # a 4xx, or a 200 for what could be read
            ok = status is not None and status < 500
        else:
            ok = status is not None and 400 <= status < 500
        entry["ok"] = ok and (not check_serving or entry["after"] == {"health": 200, "chat": 200})
    results[name] = entry
    log("%-44s %s %s in %.2f s%s" % (name, status, entry.get("media_tokens", detail) if status == 200
                                     else str(detail)[:160], seconds,
                                     " -> %s" % entry["after"] if check_serving else ""))
    return entry


def access_since(mark):
    return ACCESS[mark:]


# -- the engine -----------------------------------------------------------------------------------

def start_engine(argv, env_extra, name, health_timeout=360):
    env = dict(os.environ, PYTHONPATH=SITE + ":" + os.environ.get("PYTHONPATH", ""), VLLM_USE_FLASHINFER_SAMPLER="0",
               HF_HUB_OFFLINE="1", VLLM_USE_DEEP_GEMM="0", no_proxy="*", NO_PROXY="*", **env_extra)
    for proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(proxy, None)
    logf = open(os.path.join(OUT, "vllm-%s.log" % name), "w")
    if DRY:
        cmd = [sys.executable, os.path.abspath(__file__), OUT, "stub"]
    else:
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main"] + argv[1:]
    start = time.time()
    # a session of its own: stop_engine ends the API server and the engine core it started, together
    proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    if os.environ.get("PGID_FILE"):  # for the calling script, to end this server's group by its id if need be
        with open(os.environ["PGID_FILE"], "w") as f:
            f.write("%d\n" % proc.pid)
    while time.time() - start < health_timeout:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(URL + "/health", timeout=5) as r:
                if r.status == 200:
                    return proc, logf, round(time.time() - start, 1)
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(2)
    code = proc.poll()
    kill_group(proc, signal.SIGKILL)
    logf.close()
    return None, {"exit": code, "after_s": round(time.time() - start, 1)}, None


def kill_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_engine(proc, logf):
    """SIGTERM to the server's process group (the engine core too, also when the API server died), then SIGKILL
    to whatever of it is left after 60 s."""
    kill_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        pass
    for _i in range(30):
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(1)
    kill_group(proc, signal.SIGKILL)
    logf.close()


def log_tail(name, lines=40):
    with open(os.path.join(OUT, "vllm-%s.log" % name), errors="replace") as f:
        return f.read().splitlines()[-lines:]


def metric(text, name):
    return engines.prom_total(text, name)


def metrics():
    req = urllib.request.Request(URL + "/metrics")
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.read().decode()


# -- (a) the processor ----------------------------------------------------------------------------

def processor_check():
    out = {}
    config = write_folder()
    out["folder"] = sorted(os.listdir(FOLDER))
    import numpy as np
    import transformers
    from PIL import Image
    out["transformers"] = transformers.__version__
    for mod in ("torchvision", "cv2", "PIL", "av", "decord"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "yes")
        except ImportError as e:
            out[mod] = "missing: %s" % e
    try:
        from transformers import AutoConfig, AutoProcessor
        cfg = AutoConfig.from_pretrained(FOLDER)
        proc = AutoProcessor.from_pretrained(FOLDER)
        img = Image.fromarray(np.full((448, 672, 3), 128, np.uint8))
        message = {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}
        text = proc.apply_chat_template([message], add_generation_prompt=True, tokenize=False)
        ids = proc(text=[text], images=[img], return_tensors="pt")["input_ids"][0].tolist()
        out["transformers_processor"] = {
            "config": type(cfg).__name__, "processor": type(proc).__name__,
            "image_processor": type(proc.image_processor).__name__,
            "video_processor": type(proc.video_processor).__name__,
            "image_672x448_placeholders": ids.count(config["image_token_id"]), "expected": 16 * 24}
    except Exception as e:  # noqa: BLE001  recorded, the run goes on
        out["transformers_processor"] = {"error": repr(e)[:500]}
    log("transformers side: %s" % json.dumps(out, default=str)[:900])
    save("processor.json", out)
    if MODE == "processor-transformers":
        return out
    t = time.time()
    try:
        sys.path.insert(0, SITE)
        import vllm
        from vllm.engine.arg_utils import EngineArgs
        from vllm.multimodal import MULTIMODAL_REGISTRY
        out["vllm"] = vllm.__version__
        out["vllm_import_s"] = round(time.time() - t, 1)
        mc = EngineArgs(model=FOLDER, load_format="dummy", max_model_len=131072,
                        limit_mm_per_prompt={"image": 4, "video": 1}).create_model_config()
        processor = MULTIMODAL_REGISTRY.create_processor(mc)
        info = processor.info
        hf = info.get_hf_processor()
        out["vllm_processor"] = {
            "processor": type(processor).__name__, "hf_processor": type(hf).__name__,
            "image_processor": type(hf.image_processor).__name__, "video_processor": type(hf.video_processor).__name__,
            "max_tokens_per_item": dict(info.get_mm_max_tokens_per_item(131072, {"image": 1, "video": 1}) or {}),
            "image_672x448_tokens": info.get_num_image_tokens(image_width=672, image_height=448),
            "max_image_tokens": info.get_max_image_tokens()}
        t = time.time()
        dummy = MULTIMODAL_REGISTRY.get_dummy_mm_inputs(mc, {"image": 1})
        out["vllm_processor"]["dummy_max_image_prompt_tokens"] = len(dummy["prompt_token_ids"])
        out["vllm_processor"]["dummy_image_processed_s"] = round(time.time() - t, 2)
    except Exception as e:  # noqa: BLE001
        import traceback
        out["vllm_processor"] = {"error": repr(e)[:500], "trace": traceback.format_exc()[-2000:]}
    log("vLLM side: %s" % json.dumps({k: out.get(k) for k in ("vllm", "vllm_import_s", "vllm_processor")},
                                     default=str)[:1500])
    save("processor.json", out)
    return out


def mtp_config_probe(argv):
    """vLLM's own engine configuration for the rendered command (as `vllm serve` builds it before loading)."""
    try:
        sys.path.insert(0, SITE)
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.openai.cli_args import make_arg_parser
        from vllm.utils.argparse_utils import FlexibleArgumentParser
        args = make_arg_parser(FlexibleArgumentParser()).parse_args(["--model"] + argv[2:])
        config = AsyncEngineArgs.from_cli_args(args).create_engine_config()
        spec = config.speculative_config
        return {"ok": True, "speculative": str(spec)[:300],
                "draft_architectures": getattr(getattr(spec, "draft_model_config", None), "architectures", None)}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": repr(e)[:600]}


# -- the data-only server -------------------------------------------------------------------------

def bench_ttft(concurrency, rounds, seed0):
    """Latency of one-token replies to distinct 1024x768 photo-like JPEG requests, `concurrency` at once: each
    one's time to its first (only) token. Images a second = requests / wall time."""
    from concurrent.futures import ThreadPoolExecutor
    images = [jpeg_photo(seed0 + i) for i in range(concurrency * rounds)]
    before = metrics()
    lat, walls, tokens = [], [], []
    for r in range(rounds):
        batch = images[r * concurrency:(r + 1) * concurrency]
        t = time.time()
        with ThreadPoolExecutor(concurrency) as pool:
            res = list(pool.map(lambda b: post([image_part(b, "image/jpeg")], "What is in this photo?"), batch))
        walls.append(time.time() - t)
        lat += [x[2] for x in res if x[0] == 200]
        tokens += [x[1] for x in res if x[0] == 200]
    after = metrics()
    ttft = "vllm:time_to_first_token_seconds_"
    n, s = (metric(after, ttft + k) - metric(before, ttft + k) for k in ("count", "sum"))
    lat.sort()
    return {"concurrency": concurrency, "requests": len(images), "ok": len(lat),
            "image_bytes_median": sorted(len(i) for i in images)[len(images) // 2],
            "prompt_tokens": sorted(set(tokens))[:4],
            "ttft_p50_s": round(lat[len(lat) // 2], 3) if lat else None,
            "ttft_p90_s": round(lat[int(len(lat) * 0.9) - 1], 3) if lat else None,
            "ttft_max_s": round(lat[-1], 3) if lat else None,
            "engine_ttft_mean_s": round(s / n, 3) if n else None,
            "images_per_s": round(len(lat) / sum(walls), 2) if walls else None,
            "wall_s": [round(w, 2) for w in walls]}


def data_only():
    results = {"mode": "data-only", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    results["model"] = dummy_hf.describe(write_folder())
    red = png_bytes(__import__("numpy").full((64, 64, 3), (220, 30, 30), __import__("numpy").uint8))
    clip = mp4()
    start_media_server({"/red.png": red, "/clip.mp4": clip})
    results["processor"] = processor_check() if not DRY else None
    # The recipe drafts with MTP: vLLM's own configuration of that command first, then the serve.
    settings, rendered = render()
    results["mtp"] = {"command": rendered["display"]}
    results["mtp"]["config_probe"] = mtp_config_probe(rendered["argv"]) if not DRY else None
    log("MTP config probe: %s" % results["mtp"]["config_probe"])
    proc = None
    if not DRY and os.environ.get("TRY_MTP", "1") == "1":
        proc, logf, healthy = start_engine(rendered["argv"], rendered["env"], "data-only-mtp",
                                           float(os.environ.get("MTP_TIMEOUT", "200")))
        if proc is None:
            results["mtp"]["serve"] = dict(logf, log_tail=log_tail("data-only-mtp", 30))
            log("MTP serve failed: %s" % json.dumps(logf))
        else:
            results["mtp"]["serve"] = {"healthy_after_s": healthy}
            results["drafter"] = "mtp"
    if proc is None:
        settings, rendered = render(llm_drafter="off")
        results["drafter"] = "off"
        proc, logf, healthy = start_engine(rendered["argv"], rendered["env"], "data-only")
        if proc is None:
            results["serve_failed"] = dict(logf, log_tail=log_tail("data-only"))
            save("data-only.json", results)
            raise SystemExit("vLLM did not serve: %s" % logf)
    results.update(command=rendered["display"], env=sorted(rendered["env"]), healthy_after_s=healthy)
    log("healthy after %s s, drafter %s" % (healthy, results["drafter"]))
    save("data-only.json", results)
    try:
        run_data_only_cases(results, red, clip)
    finally:
        stop_engine(proc, logf)
        results["access_log"] = ACCESS
        save("data-only.json", results)


def run_data_only_cases(results, red, clip):
    import numpy as np
    c = results["cases"] = {}
    base = post([], "Describe this.")
    results["text_only_prompt_tokens"] = base[1]
    log("text only: %s" % (base,))
    # accepted and counted
    img = png_bytes(np.full((448, 672, 3), 90, np.uint8))
    case(c, "image 672x448 PNG", [image_part(img)], "200")
    case(c, "image 64x64 PNG", [image_part(red)], "200")
    case(c, "two 64x64 PNGs", [image_part(red), image_part(red)], "200")
    case(c, "image 1024x768 JPEG", [image_part(jpeg_photo(1), "image/jpeg")], "200")
    case(c, "video 4 s 224x224 MP4 (8 fps)", [video_part(clip)], "200", "What happens?")
    case(c, "video 8 s 224x224 MP4", [video_part(mp4(seconds=8))], "200", "What happens?")
    avi = prompts.avi([col for _n, col in prompts.COLOURS] * 3)
    case(c, "video 2.25 s AVI (verify's, hand-made)", [video_part(avi, "video/x-msvideo")], "200", "What happens?")
    case(c, "image + video in one message", [image_part(red), video_part(clip)], "200")
    # refused without a fetch
    mark = len(ACCESS)
    for name, url in (("http refused.test", media_url("refused.test", "/red.png")),
                      ("http allowed.test", media_url("allowed.test", "/red.png")),
                      ("https refused.test", "https://refused.test/red.png"),
                      ("http invalid (in /etc/hosts here)", media_url("invalid", "/red.png")),
                      ("http INVALID", media_url("INVALID", "/red.png")),
                      ("http 127.0.0.1", media_url("127.0.0.1", "/red.png")),
                      ("http allowed.test@refused.test", "http://allowed.test@refused.test:%d/red.png" % MEDIA_PORT)):
        case(c, "URL: " + name, [image_part(url)], "4xx")
    case(c, "URL: video http allowed.test", [video_part(media_url("allowed.test", "/clip.mp4"))], "4xx")
    time.sleep(1)
    results["fetches_while_data_only"] = access_since(mark)
    log("media server requests while data-only: %s" % results["fetches_while_data_only"])
    # what the old value (--allowed-media-domains invalid) does with http://invalid/: vLLM's own connector
    results["connector_with_invalid"] = connector_fetch(["invalid"], media_url("invalid", "/red.png"))
    save("data-only.json", results)
    # too big, too many, corrupt
    log("time left %.0f s" % time_left())
    big, side = big_png()
    results["big_png"] = {"side": side, "png_bytes": len(big), "data_url_bytes": len(base64.b64encode(big)) + 22}
    case(c, "30 MB data URL (noise PNG %dx%d)" % (side, side), [image_part(big)], "report", check_serving=True)
    bomb = bomb_png()
    results["bomb_png_bytes"] = len(bomb)
    case(c, "PNG of 14000x14000 (196 M pixels)", [image_part(bomb)], "4xx", check_serving=True)
    case(c, "5 images (limit 4)", [image_part(red)] * 5, "4xx", check_serving=True)
    case(c, "corrupt PNG", [image_part(prompts.CORRUPT_PNG)], "4xx", check_serving=True)
    case(c, "truncated PNG", [image_part(img[:len(img) // 2])], "4xx", check_serving=True)
    case(c, "text as image/png", [image_part(b"not an image at all")], "4xx", check_serving=True)
    case(c, "corrupt video (AVI header)", [video_part(prompts.CORRUPT_AVI, "video/x-msvideo")], "4xx",
         check_serving=True)
    case(c, "truncated MP4", [video_part(clip[:len(clip) // 3])], "4xx", check_serving=True)
    save("data-only.json", results)
    # images whose tokens with the text exceed the context: 4 of the most tokens an image can have + text
    if time_left() < 150:
        results["skipped"] = ["context overflow", "verify", "bench"]
        return
    most = png_bytes(np.full((3136, 3136, 3), 60, np.uint8))  # 9.83 M pixels: resized to the 9.63 M cap
    four = case(c, "4 largest images", [image_part(most)] * 4, "200")
    if four["status"] == 200:
        sizer = prompts.Sizer(lambda t: post([], t)[1])
        fill = prompts.filler(11, sizer.chars(131072 - four["prompt_tokens"] + 2000))
        case(c, "4 largest images + text past llm_context", [image_part(most)] * 4, "4xx", text=fill,
             check_serving=True)
    save("data-only.json", results)
    # verify's media checks, as the verify role runs them
    if time_left() < 110:
        results["skipped"] = ["verify", "bench"]
        return
    from ansible_collections.gpuserve.llm.plugins.module_utils import verify
    from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client
    client = Client(URL, KEY, "glm-4.6v", timeout=600)
    opts = {"vision": True, "dummy": True, "media_urls": "data_only", "drafter": results["drafter"]}
    t = time.time()
    checks, _hashes = verify.Verifier(client, opts, None, log=log).run(["image_input", "video_input", "images"], {})
    results["verify"] = [dict((k, ch[k]) for k in ("name", "status", "passed", "total", "counted", "why", "examples")
                              if k in ch) for ch in checks if ch["name"] in ("image_input", "video_input", "images")]
    results["verify_s"] = round(time.time() - t, 1)
    log("verify: %s" % [(ch["name"], ch["status"], ch["passed"], ch["total"]) for ch in results["verify"]])
    save("data-only.json", results)
    # bench: time to first token of an image request, 1 and 16 at once, and images a second
    if time_left() < 60:
        results["skipped"] = ["bench"]
        return
    results["bench"] = [bench_ttft(1, 8, 100), bench_ttft(16, 3, 200)]
    for row in results["bench"]:
        log("bench %s" % row)
    results["metrics"] = [line for line in metrics().splitlines() if line.startswith((
        "vllm:prompt_tokens_total", "vllm:request_success_total", "vllm:mm_cache", "vllm:spec_decode"))][:20]


def connector_fetch(domains, url, allow_redirects=None):
    """vLLM 0.26.0's MediaConnector (the code the server runs) given `domains`: did it fetch, what came back."""
    if DRY:
        return None
    sys.path.insert(0, SITE)
    if allow_redirects is not None:
        os.environ["VLLM_MEDIA_URL_ALLOW_REDIRECTS"] = "1" if allow_redirects else "0"
    from vllm.multimodal.media.connector import MediaConnector
    mark = len(ACCESS)
    try:
        image = MediaConnector(allowed_media_domains=domains).fetch_image(url)
        outcome = "fetched: %s" % (getattr(image, "size", None),)
    except Exception as e:  # noqa: BLE001
        outcome = "refused: %r" % e
    time.sleep(0.5)
    out = {"domains": domains, "url": url, "allow_redirects": allow_redirects, "outcome": outcome[:300],
           "requests": access_since(mark)}
    log("connector %s" % out)
    return out


# -- the domains server ---------------------------------------------------------------------------

def domains():
    results = {"mode": "domains", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    results["model"] = dummy_hf.describe(write_folder())
    import numpy as np
    red = png_bytes(np.full((64, 64, 3), (220, 30, 30), np.uint8))
    blue = png_bytes(np.full((96, 128, 3), (30, 70, 220), np.uint8))
    clip = mp4()
    start_media_server({"/red.png": red, "/blue.png": blue, "/clip.mp4": clip})
    settings, rendered = render(llm_drafter="off", llm_media_urls=["allowed.test"])
    proc, logf, healthy = start_engine(rendered["argv"], rendered["env"], "domains")
    if proc is None:
        results["serve_failed"] = dict(logf, log_tail=log_tail("domains"))
        save("domains.json", results)
        raise SystemExit("vLLM did not serve: %s" % logf)
    results.update(command=rendered["display"], env=sorted(rendered["env"]), healthy_after_s=healthy)
    log("healthy after %s s" % healthy)
    c = results["cases"] = {}
    try:
        base = post([], "Describe this.")
        results["text_only_prompt_tokens"] = base[1]
        steps = [("allowed.test PNG", [image_part(media_url("allowed.test", "/red.png"))], "200"),
                 ("ALLOWED.TEST PNG (upper case)", [image_part(media_url("ALLOWED.TEST", "/blue.png"))], "200"),
                 ("refused.test PNG", [image_part(media_url("refused.test", "/red.png"))], "4xx"),
                 ("allowed.test redirect to refused.test", [image_part(media_url("allowed.test", "/redirect"))], "4xx"),
                 ("allowed.test@refused.test", [image_part("http://allowed.test@refused.test:%d/red.png" % MEDIA_PORT)],
                  "4xx"),
                 ("invalid PNG", [image_part(media_url("invalid", "/red.png"))], "4xx"),
                 ("allowed.test MP4", [video_part(media_url("allowed.test", "/clip.mp4"))], "200"),
                 ("data URL PNG", [image_part(red)], "200")]
        for name, parts, expect in steps:
            mark = len(ACCESS)
            entry = case(c, name, parts, expect)
            time.sleep(0.3)
            entry["requests"] = access_since(mark)
        results["access_log"] = list(ACCESS)
        # vLLM's default, which the rendered env turns off: a redirect from an allowed domain is followed anywhere
        redirect = media_url("allowed.test", "/redirect")
        results["connector_redirects_default"] = connector_fetch(["allowed.test"], redirect, allow_redirects=True)
        results["connector_redirects_off"] = connector_fetch(["allowed.test"], redirect, allow_redirects=False)
        save("domains.json", results)
        # last, as it may take the engine down: a raw AVI stored bottom-up, which crashed OpenCV 5.0.0's reader
        # (heap corruption) on the workstation
        import cv2
        results["opencv"] = cv2.__version__
        case(c, "bottom-up raw AVI", [video_part(bottom_up_avi(), "video/x-msvideo")], "report", "What happens?",
             check_serving=True)
    finally:
        stop_engine(proc, logf)
        results["access_log"] = list(ACCESS)
        save("domains.json", results)


# -- what must be refused, after the patch series ----------------------------------------------------

def bottom_up_avi():
    """An uncompressed AVI stored bottom-up (a positive DIB height: the usual layout)."""
    avi = bytearray(prompts.avi([col for _n, col in prompts.COLOURS] * 3))
    strf = avi.index(b"strf") + 8
    avi[strf + 8:strf + 12] = (112).to_bytes(4, "little")
    return bytes(avi)


def catalogue_case(results, table, entry_case):
    """One case of plugins/module_utils/bad_media.py, then a good request: status, the engine's message, served after."""
    entry = case(results, entry_case["name"], entry_case["parts"], entry_case["expect"], check_serving=True)
    entry.update(klass=entry_case["klass"], why=entry_case["why"])
    table.append({"case": entry_case["name"], "klass": entry_case["klass"], "expect": entry_case["expect"],
                  "status": entry["status"], "message": entry.get("error", "")[:300],
                  "served_after": entry["after"] == {"health": 200, "chat": 200}, "ok": entry["ok"]})
    return entry


def refusals():
    """Every case of the bad-media catalogue (issue 39), each followed by a good request, around the cases that must
    be served (200). LABEL names the run (patched, unpatched): refusals-LABEL.json, vllm-refusals-LABEL.log. The
    case that killed an unpatched server goes last."""
    from ansible_collections.gpuserve.llm.plugins.module_utils import bad_media
    label = os.environ.get("LABEL", "patched")
    name = "refusals-%s" % label
    results = {"mode": "refusals", "label": label, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    results["model"] = dummy_hf.describe(write_folder())
    import numpy as np
    settings, rendered = render(llm_drafter="off")
    proc, logf, healthy = start_engine(rendered["argv"], rendered["env"], name)
    if proc is None:
        results["serve_failed"] = dict(logf, log_tail=log_tail(name))
        save(name + ".json", results)
        raise SystemExit("vLLM did not serve: %s" % logf)
    results.update(command=rendered["display"], healthy_after_s=healthy)
    log("healthy after %s s" % healthy)
    c = results["cases"] = {}
    table = results["table"] = []
    catalogue = bad_media.cases()
    try:
        img = png_bytes(np.full((448, 672, 3), 90, np.uint8))
        case(c, "image 672x448 PNG", [image_part(img)], "200")
        for entry_case in [x for x in catalogue if not x["lethal"]]:
            if time_left() < 30:
                results.setdefault("skipped", []).append(entry_case["name"])
                continue
            catalogue_case(c, table, entry_case)
            save(name + ".json", results)
        # beside the catalogue: 2026-12-01's bombs and an MP4 cut short (OpenCV's mp4v: no MP4 writer here)
        case(c, "PNG of 14000x14000 (196 M pixels)", [image_part(bomb_png())], "4xx", check_serving=True)
        case(c, "PNG of 10000x10000 (100 M pixels)", [image_part(bomb_png(10000))], "report", check_serving=True)
        clip = mp4()
        case(c, "truncated MP4", [video_part(clip[:len(clip) // 3])], "4xx", check_serving=True)
        # what must still be served
        case(c, "top-down raw AVI", [video_part(prompts.avi([col for _n, col in prompts.COLOURS] * 3),
                                                "video/x-msvideo")], "200", "What happens?")
        case(c, "video 4 s 224x224 MP4", [video_part(clip)], "200", "What happens?")
        case(c, "image 64x64 PNG (catalogue's good PNG)", [image_part(bad_media.good_png())], "200")
        save(name + ".json", results)
        if time_left() > 60:
            from ansible_collections.gpuserve.llm.plugins.module_utils import verify
            from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client
            verifier = verify.Verifier(Client(URL, KEY, "glm-4.6v", timeout=600),
                                       {"vision": True, "dummy": True, "media_urls": "data_only"}, None, log=log)
            checks, _hashes = verifier.run(["image_input", "video_input"], {})
            results["verify"] = [dict((k, ch[k]) for k in ("name", "status", "passed", "total", "why", "examples"))
                                 for ch in checks if ch["name"] in ("image_input", "video_input")]
            log("verify: %s" % [(ch["name"], ch["status"], ch["passed"], ch["total"]) for ch in results["verify"]])
        else:
            results.setdefault("skipped", []).append("verify")
        save(name + ".json", results)
        # last: what killed an unpatched server
        for entry_case in [x for x in catalogue if x["lethal"]]:
            catalogue_case(c, table, entry_case)
        results["engine_alive_after"] = proc.poll() is None
        results["log_tail"] = log_tail(name, 30)
    finally:
        stop_engine(proc, logf)
        save(name + ".json", results)
    for row in table:
        log("| %-26s | %s | %s | %-5s | %s" % (
            row["case"], row["expect"], row["status"], row["served_after"], row["message"][:120]))


# -- a stub engine for the dry run ----------------------------------------------------------------

class Stub(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, obj):
        data = (json.dumps(obj) if not isinstance(obj, str) else obj).encode()
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, "vllm:time_to_first_token_seconds_count 0\n" if self.path == "/metrics" else {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        parts = body["messages"][0]["content"]
        tokens = 10 + sum(len(p.get("text", "")) // 4 for p in parts if isinstance(p, dict))
        for p in parts:
            url = (p.get("image_url") or p.get("video_url") or {}).get("url", "") if isinstance(p, dict) else ""
            if url and not url.startswith("data:"):
                return self._send(400, {"error": "The URL must be from one of the allowed domains"})
            tokens += len(url) // 1000
        if tokens > 131072:
            return self._send(400, {"error": "too long"})
        self._send(200, {"usage": {"prompt_tokens": tokens}, "choices": [{"message": {"content": ""}}]})


if MODE == "stub":
    socketserver.ThreadingTCPServer.allow_reuse_address = True
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", PORT), Stub)
    srv.daemon_threads = True
    srv.serve_forever()
elif MODE in ("processor", "processor-transformers"):
    processor_check()
elif MODE in ("data-only", "dry"):
    data_only()
elif MODE in ("domains", "dry-domains"):
    domains()
elif MODE in ("refusals", "dry-refusals"):
    refusals()
else:
    raise SystemExit("unknown mode %s" % MODE)
