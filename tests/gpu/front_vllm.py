"""Issue 36 item 7 on a GPU machine: vLLM 0.26.0 with the project's rendered command (the example recipe on one
GPU, the burn-in GLM-4.6V folder, engine on 127.0.0.1:18020 with VLLM_API_KEY = the internal key) behind the
front (templates/front.conf.j2 and roles/front/files/front_auth.js, rendered as the front role renders them, in
nginx and its JavaScript module from Debian's packages, unpacked with dpkg -x into a private folder) on
127.0.0.1:8020 with two client keys. It records each path's status through the front without a key and with a
client key, the same paths sent straight to the engine for contrast, chat / a streamed chat / an image chat /
/v1/responses through the front, and judges what arrived by vLLM's own access log (uvicorn's request lines):
the front reaches the engine from 127.0.0.1, requests sent straight to the engine come from 127.0.0.2, this
script's requests to the front from 127.0.0.3.

    python3 tests/gpu/front_vllm.py OUT run     # on the GPU machine (vLLM at VLLM_SITE, .debs in FRONT_DEBS)
    python3 tests/gpu/front_vllm.py OUT dry     # the same through the real nginx before a stub engine, no GPU
    python3 tests/gpu/front_vllm.py OUT bad-media      # issue 39 item 2 through the front (below)
    python3 tests/gpu/front_vllm.py OUT dry-bad-media  # the same before the stub engine, no GPU

bad-media: the same front (front_media.js checks every POST body) and engine, and every case of the bad-media
catalogue (plugins/module_utils/bad_media.py, the case that killed an unpatched vLLM last) sent through the front
with a client key, with the front's own cases beside it (five distinct images, data URLs over front_media_item_mib
as a video, without ;base64 and in a text part, a body that is not JSON, empty, an array, and 40 levels deep with and
without an image part); each followed by /health and a text chat through the front. Per case: status, the message,
whether the request reached vLLM (vLLM's access log: a line from the front's address; the front's log: upstream=)
and whether the server answered after. Into OUT: front-bad-media.json, front-bad-media.md, front.conf and the two
logs. vLLM is patched beforehand where the calling script wants it so (h200-front-bad-media-2026-12-04/run.sh).

Environment: FRONT_DEBS (folder of .debs: nginx, libnginx-mod-http-js and the libraries they need, libc6
included), FRONT_ROOT (where they are unpacked, default /tmp/gpuserve-front-root), VLLM_SITE (default
/root/vllm/site), LAYERS (8), HEALTH_TIMEOUT (300), DEADLINE (seconds the whole run may take, 540), FRONT_PORT
and ENGINE_PORT (8020 and 18020, the project's defaults for llm_port and llm_engine_port).
How the files travel and the calls: tests/gpu/h200-front-vllm-2026-12-02/run.sh.
"""
import base64
import glob
import hashlib
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import jinja2
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The collection's module_utils by their collection name, without an installed collection.
COLLECTIONS = tempfile.mkdtemp(prefix="gpuserve-collections-")
os.makedirs(os.path.join(COLLECTIONS, "ansible_collections", "gpuserve"))
os.symlink(ROOT, os.path.join(COLLECTIONS, "ansible_collections", "gpuserve", "llm"))
sys.path.insert(0, COLLECTIONS)
from ansible_collections.gpuserve.llm.plugins.module_utils import dummy_hf, engines, prompts  # noqa: E402

OUT, MODE = sys.argv[1], sys.argv[2]
DRY = MODE in ("dry", "dry-bad-media")
MEDIA = MODE in ("bad-media", "dry-bad-media")
NAME = "front-bad-media" if MEDIA else "front-vllm"
SITE = os.environ.get("VLLM_SITE", "/root/vllm/site")
LAYERS = int(os.environ.get("LAYERS", "8"))
FRONT_PORT = int(os.environ.get("FRONT_PORT", "8020"))
ENGINE_PORT = int(os.environ.get("ENGINE_PORT", "18020"))
FRONT_DEBS = os.environ.get("FRONT_DEBS", "")
FRONT_ROOT = os.environ.get("FRONT_ROOT", "/tmp/gpuserve-front-root")
PREFIX = tempfile.mkdtemp(prefix="gpuserve-front-")
T0 = time.time()
DEADLINE = float(os.environ.get("DEADLINE", "540"))
HEALTH_TIMEOUT = float(os.environ.get("HEALTH_TIMEOUT", "300"))
INTERNAL_KEY = "sk-internal-front-test-0123456789"
CLIENTS = {"alice": "sk-client-alice-0123456789abcdef", "ci.bot": "sk-client-ci-bot-0123456789abcdef"}
NGINX_ADDR, DIRECT_ADDR, CLIENT_ADDR = "127.0.0.1", "127.0.0.2", "127.0.0.3"
FOLDER = "/root/glm46v-dummy" if not DRY else os.path.join(PREFIX, "glm46v-dummy")
ROUTES = engines.PROFILES["vllm"]["front_routes"]
ALLOWED = set(ROUTES) | {"/health"}
ENGINE_LOG = os.path.join(OUT, "vllm-front.log")
FRONT_LOG = os.path.join(OUT, "nginx-front.log")
os.makedirs(OUT, exist_ok=True)
os.chmod(PREFIX, 0o755)  # nginx's workers (nobody) read front_auth.js here
for _proxy in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
    os.environ.pop(_proxy, None)
RESULTS = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "mode": MODE}


def log(line):
    print("%6.1f %s" % (time.time() - T0, line), flush=True)


def load(path):
    with open(os.path.join(ROOT, path)) as f:
        return yaml.safe_load(f)


def save():
    with open(os.path.join(OUT, NAME + ".json"), "w") as f:
        json.dump(RESULTS, f, indent=1, default=str)


def sh(cmd, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    return p.returncode, (p.stdout + p.stderr).strip()


# -- the machine ----------------------------------------------------------------------------------

def machine():
    import platform
    out = {"kernel": os.uname().release, "cpus": os.cpu_count(), "glibc": " ".join(platform.libc_ver())}
    if not DRY:
        out["gpu"] = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used",
                         "--format=csv,noheader"])[1]
    if os.path.exists("/etc/os-release"):
        with open("/etc/os-release") as f:
            out["os"] = dict(re.findall(r'^(PRETTY_NAME)="?([^"\n]*)', f.read(), re.M)).get("PRETTY_NAME")
    return out


# -- nginx from Debian's packages, unpacked privately ---------------------------------------------

def deb_members(deb):
    """{name: bytes} of a .deb's ar members (for a machine without dpkg)."""
    with open(deb, "rb") as f:
        data = f.read()
    members, pos = {}, 8
    while pos + 60 <= len(data):
        name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58].decode().strip())
        members[name] = data[pos + 60:pos + 60 + size]
        pos += 60 + size + size % 2
    return members


def deb_x(deb, dest):
    """(Package, Version) of a .deb, its files unpacked into dest: dpkg -x, or the same by hand."""
    try:
        fields = sh(["dpkg-deb", "-f", deb, "Package", "Version"])[1]
        info = dict(line.split(": ", 1) for line in fields.splitlines())
        rc, text = sh(["dpkg", "-x", deb, dest])
        if rc:
            raise SystemExit("dpkg -x %s: %s" % (deb, text))
        return info["Package"], info["Version"], "dpkg -x"
    except FileNotFoundError:
        import io
        import tarfile
        members = deb_members(deb)
        data = [n for n in members if n.startswith("data.tar")][0]
        control = [n for n in members if n.startswith("control.tar")][0]
        with tarfile.open(fileobj=io.BytesIO(members[control])) as tar:
            text = tar.extractfile("./control").read().decode()
        info = dict(re.findall(r"^(Package|Version): (.*)$", text, re.M))
        with tarfile.open(fileobj=io.BytesIO(members[data])) as tar:
            tar.extractall(dest, filter="tar")
        return info["Package"], info["Version"], "tarfile (no dpkg here)"


def unpack_front():
    """dpkg -x every .deb of FRONT_DEBS into FRONT_ROOT (libc6 into FRONT_ROOT/glibc, apart: it is used only
    where the machine's own glibc is older than the packages need)."""
    debs = []
    for deb in sorted(glob.glob(os.path.join(FRONT_DEBS, "*.deb"))):
        libc = os.path.basename(deb).startswith("libc6_")
        dest = os.path.join(FRONT_ROOT, "glibc") if libc else FRONT_ROOT
        os.makedirs(dest, exist_ok=True)
        package, version, how = deb_x(deb, dest)
        debs.append("%s %s (%s)" % (package, version, how))
    return debs


def nginx_runners():
    """The ways to run the unpacked nginx: with the machine's glibc and the packages' libraries on
    LD_LIBRARY_PATH, then with Debian's own loader and libc (libc6's .deb) for a machine whose glibc is older."""
    libs = os.path.join(FRONT_ROOT, "usr", "lib", "x86_64-linux-gnu")
    nginx = os.path.join(FRONT_ROOT, "usr", "sbin", "nginx")
    glibc = os.path.join(FRONT_ROOT, "glibc", "usr", "lib", "x86_64-linux-gnu")
    return [("the machine's glibc, LD_LIBRARY_PATH=%s" % libs, [nginx], {"LD_LIBRARY_PATH": libs}),
            ("Debian's loader and libc from libc6's .deb", [os.path.join(glibc, "ld-linux-x86-64.so.2"),
                                                            "--library-path", glibc + ":" + libs, nginx], {})]


def ldd(runner_env):
    out = {}
    for path in ("usr/sbin/nginx", "usr/lib/nginx/modules/ngx_http_js_module.so"):
        try:
            text = sh(["ldd", os.path.join(FRONT_ROOT, path)], env=dict(os.environ, **runner_env))[1]
        except FileNotFoundError:
            text = "no ldd here"
        out[path] = [line.strip() for line in text.splitlines()]
    return out


# -- the front's configuration, as the front role renders it ---------------------------------------

def front_settings(settings):
    """The front role's defaults and vars for these settings (roles/front/defaults, roles/front/vars)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes", "on")
    defaults = load("roles/front/defaults/main.yml")
    ctx = dict(settings)
    for name in ("front_rate_per_key", "front_rate_burst", "front_connections_per_key", "front_connections_per_address",
                 "front_media_item_mib", "front_body_max_kib", "front_workers", "front_worker_connections"):
        value = defaults[name]
        ctx[name] = int(env.from_string(value).render(**ctx).strip()) if isinstance(value, str) else value
    retry = load("roles/front/vars/main.yml")["front_retry_after"]
    ctx["front_retry_after"] = int(env.from_string(retry).render(**ctx).strip())
    # front_media and front_media_why (roles/front/vars/main.yml) for a host's front before vLLM
    vision = env.from_string("{{ v | bool }}").render(v=settings.get("llm_vision")) == "True"
    ctx["front_media"] = engines.PROFILES["vllm"]["media_per_request"] if vision else {"image": 0, "video": 0}
    ctx["front_media_why"] = ("vllm takes at most %(image)d images and %(video)d video a request" % ctx["front_media"]
                              if vision else "the model here is served without vision (llm_vision is off): it takes "
                              "no images or video")
    # front_media_urls (roles/front/vars/main.yml): the recipe's llm_media_urls
    media_urls = settings.get("llm_media_urls", "data_only")
    ctx["front_media_urls"] = media_urls if media_urls in ("data_only", "any") else " ".join(media_urls).lower()
    return ctx


def render_front(settings):
    ctx = front_settings(settings)
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["hash"] = lambda value, kind: hashlib.new(kind, value.encode()).hexdigest()
    env.filters["bool"] = lambda v: v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes", "on")
    with open(os.path.join(ROOT, "templates", "front.conf.j2")) as f:
        template = env.from_string(f.read())
    ctx.update(front_name="gpuserve-llm-front", front_stage="service", front_clients=CLIENTS,
               front_worker_user=load("roles/front/vars/main.yml")["front_worker_user"],
               front_listen="127.0.0.1:%d" % FRONT_PORT, front_upstream="127.0.0.1:%d" % ENGINE_PORT,
               front_health_path=engines.PROFILES["vllm"]["health"]["path"], front_routes=ROUTES)
    conf = template.render(**ctx)
    # Where the container has its files, this machine has a private folder: the only changes.
    module = os.path.join(FRONT_ROOT, "usr", "lib", "nginx", "modules", "ngx_http_js_module.so")
    temps = "".join("    %s_temp_path %s/%s;\n" % (kind, PREFIX, kind)
                    for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    changes = [("load_module /usr/lib/nginx/modules/ngx_http_js_module.so;", "load_module %s;" % module),
               # The image's workers' user (front_worker_add) is not on this machine: nginx's default (nobody).
               ("user %s;\n" % ctx["front_worker_user"], ""),
               ("pid /run/gpuserve-llm-front.pid;", "pid %s/front.pid;" % PREFIX),
               ("js_path /etc/gpuserve;", "js_path %s;" % PREFIX),
               ("http {\n", "http {\n    # Debian's nginx keeps these under /var/lib/nginx, which this machine lacks.\n" + temps)]
    for old, new in changes:
        if conf.count(old) != 1:
            raise SystemExit("the rendered front.conf has %d of %r" % (conf.count(old), old))
        conf = conf.replace(old, new)
    with open(os.path.join(PREFIX, "front.conf"), "w") as f:
        f.write(conf)
    for script in ("front_auth.js", "front_media.js"):
        with open(os.path.join(ROOT, "roles", "front", "files", script)) as src:
            with open(os.path.join(PREFIX, script), "w") as dst:
                dst.write(src.read())
    for name in ("front.conf", "front_auth.js", "front_media.js"):
        os.chmod(os.path.join(PREFIX, name), 0o644)
    RESULTS["front"] = {"limits": {k: ctx[k] for k in ctx if k.startswith("front_") and isinstance(ctx[k], int)},
                        "routes": ROUTES, "clients": sorted(CLIENTS), "adjusted": [new for _old, new in changes]}
    with open(os.path.join(OUT, "front.conf"), "w") as f:
        f.write(conf)  # client keys appear as digests only
    return conf


def start_front():
    conf = os.path.join(PREFIX, "front.conf")
    args = ["-p", PREFIX + "/", "-e", "stderr", "-c", conf]
    tried = []
    for name, cmd, env_extra in nginx_runners():
        env = dict(os.environ, GPUSERVE_UPSTREAM_KEY=INTERNAL_KEY, **env_extra)
        rc, text = sh(cmd + ["-t"] + args, env=env)
        tried.append({"runner": name, "nginx -t": rc, "says": text[-600:]})
        log("nginx -t with %s: rc %d %s" % (name, rc, text[-300:]))
        if rc == 0:
            RESULTS["nginx"] = {"runner": name, "command": cmd + args + ["-g", "daemon off;"], "tried": tried,
                                "version": sh(cmd + ["-V"], env=env)[1].splitlines()[:2],
                                "ldd_with_the_machines_glibc": ldd(nginx_runners()[0][2])}
            logf = open(FRONT_LOG, "a")
            proc = subprocess.Popen(cmd + args + ["-g", "daemon off;"], env=env, stdout=logf, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            time.sleep(1)
            if proc.poll() is not None:
                raise SystemExit("nginx exited: %s" % proc.returncode)
            return proc, logf
    RESULTS["nginx"] = {"tried": tried}
    save()
    raise SystemExit("nginx refused to start with either runner")


# -- the engine -------------------------------------------------------------------------------------

def gpu_memory_mib():
    if DRY:
        return 143771
    import pynvml
    pynvml.nvmlInit()
    return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total // (1024 * 1024))


def settings_for(**changes):
    """The example recipe's settings on one GPU (as serve_vision_glm.py takes them), the engine where the project
    now binds it (llm_engine_host, llm_engine_port), the internal key as llm_api_key."""
    defaults = dict((k, v) for k, v in load("roles/llm/defaults/main.yml").items() if "{{" not in str(v))
    settings = dict(defaults, **load("inventories/example/group_vars/llm_hosts/settings.yml"))
    settings.update(llm_weights="dummy", llm_gpus=[0], llm_api_key=INTERNAL_KEY, llm_client_keys=CLIENTS,
                    llm_port=FRONT_PORT, llm_engine_host="127.0.0.1", llm_engine_port=ENGINE_PORT,
                    llm_model_dense="fp8")
    settings.update(changes)
    return settings


def render_engine(settings):
    with open(os.path.join(ROOT, "templates", "vllm.j2")) as f:
        return engines.render(f.read(), engines.command_context(
            settings, {"model_dir": FOLDER, "dummy": True}, {"gpu_memory_total_mib": gpu_memory_mib()}),
            {"llm_api_key": INTERNAL_KEY})


def write_folder():
    with open(os.path.join(ROOT, "templates", "chat", "glm46v.jinja")) as f:
        template = f.read()
    weights = load("roles/weights/defaults/main.yml")
    files = dummy_hf.folder_files(template, "glm4v_moe", LAYERS, weights["weights_fp8_quantization"])
    os.makedirs(FOLDER, exist_ok=True)
    for name, text in files.items():
        with open(os.path.join(FOLDER, name), "w") as f:
            f.write(text)
    return dummy_hf.describe(json.loads(files["config.json"]))


def start_engine(rendered, name):
    env = dict(os.environ, PYTHONPATH=SITE + ":" + os.environ.get("PYTHONPATH", ""), VLLM_USE_FLASHINFER_SAMPLER="0",
               HF_HUB_OFFLINE="1", VLLM_USE_DEEP_GEMM="0", PYTHONUNBUFFERED="1", no_proxy="*", NO_PROXY="*",
               **rendered["env"])
    logf = open(ENGINE_LOG, "a")
    logf.write("==== %s: %s\n" % (name, rendered["display"]))
    logf.flush()
    if DRY:
        cmd = [sys.executable, os.path.abspath(__file__), OUT, "stub"]
    else:
        cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main"] + rendered["argv"][1:]
    start = time.time()
    proc = subprocess.Popen(cmd, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
    limit = min(HEALTH_TIMEOUT, DEADLINE - (time.time() - T0) - 90)
    while time.time() - start < limit and proc.poll() is None:
        if request("GET", "/health", via="engine")["status"] == 200:
            return proc, logf, round(time.time() - start, 1)
        time.sleep(2)
    code = proc.poll()
    stop(proc, logf)
    return None, {"exit": code, "after_s": round(time.time() - start, 1)}, None


def stop(proc, logf, sig=signal.SIGTERM):
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what the process left in its own session (vLLM's engine core)
    except ProcessLookupError:
        pass
    logf.close()


# -- requests ---------------------------------------------------------------------------------------

def request(method, path, body=None, key=None, via="front", stream=False, timeout=120, raw=None):
    """One request with the raw path as given (no client-side normalisation), from CLIENT_ADDR to the front or
    from DIRECT_ADDR to the engine; `raw` (bytes) is sent as the body as it is, as JSON.
    {status, body (first 300 chars), seconds[, message (an error's), chunks, first_chunk_s]}"""
    port, source = (FRONT_PORT, CLIENT_ADDR) if via == "front" else (ENGINE_PORT, DIRECT_ADDR)
    headers = {"Content-Type": "application/json"} if body is not None or raw is not None else {}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    t = time.time()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout, source_address=(source, 0))
    try:
        conn.request(method, path, body=data, headers=headers)
        resp = conn.getresponse()
        out = {"status": resp.status}
        if stream and resp.status == 200:
            chunks, first = [], None
            for raw in resp:
                line = raw.decode("utf-8", "replace").strip()
                if line.startswith("data:"):
                    first = first or round(time.time() - t, 3)
                    chunks.append(line[5:].strip())
            out.update(chunks=len(chunks), first_chunk_s=first, done=bool(chunks) and chunks[-1] == "[DONE]",
                       text="".join(json.loads(c)["choices"][0]["delta"].get("content") or ""
                                    for c in chunks if c.startswith("{") and json.loads(c).get("choices"))[:200])
        else:
            text = resp.read().decode("utf-8", "replace")
            out["body"] = text[:300]
            if resp.status >= 400:
                out["message"] = error_message(text)[:400]
            try:
                out["usage"] = json.loads(text).get("usage")
            except (ValueError, AttributeError):
                pass
    except (OSError, http.client.HTTPException) as e:
        out = {"status": None, "body": repr(e)[:300]}
    finally:
        conn.close()
    out["seconds"] = round(time.time() - t, 3)
    return out


def error_message(text):
    """An error body's own words: {"error": {"message": ...}} (the front's and vLLM's), {"message"}/{"detail"}, else
    the body."""
    try:
        data = json.loads(text)
    except ValueError:
        return text.strip()
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or text.strip())
    return str(err)


ACCESS = re.compile(r'INFO:\s+(\d+\.\d+\.\d+\.\d+):\d+ - "(\S+) (.*?) HTTP/[\d.]+" (\d+)')
# The front's access log (front.conf.j2's log_format gpuserve), in FRONT_LOG with nginx's stderr.
FRONT_ACCESS = re.compile(r'^(\S+) (\S*) \[(\S+)\] "(\S+) (.*?)" (\d+) (\d+) (\d+) (\S+) upstream=(\S*) path=(\S*)$',
                          re.M)


def engine_lines():
    """vLLM's access log so far: (client address, method, path, status) for each request line."""
    with open(ENGINE_LOG, errors="replace") as f:
        return [m.groups() for m in ACCESS.finditer(f.read())]


def chat_body(content="Say hello.", **extra):
    return dict({"model": SERVED, "messages": [{"role": "user", "content": content}], "max_tokens": 8,
                 "temperature": 0}, **extra)


SERVED = "glm-4.6v"
CASES = []


def key_name(key):
    if not key:
        return "none"
    if key == INTERNAL_KEY:
        return "internal"
    return ([name for name, value in CLIENTS.items() if value == key] or ["wrong"])[0]


def case(name, method, path, body=None, key=None, via="front", expect=404, stream=False):
    """A request and what vLLM logged while it ran (by address: from the front, or straight)."""
    mark = len(engine_lines())
    result = request(method, path, body, key, via, stream)
    time.sleep(0.15)
    arrived = [{"from": a, "method": m, "path": p, "status": int(s)} for a, m, p, s in engine_lines()[mark:]]
    entry = dict(name=name, method=method, path=path, via=via, expect=expect, arrived=arrived, **result)
    entry["key"] = key_name(key)
    if via == "front" and expect != 200:
        entry["ok"] = result["status"] == expect and not arrived
    else:
        entry["ok"] = result["status"] == expect
    CASES.append(entry)
    log("%-5s %-6s %-7s %-46s %s (want %s) arrived %s" % (
        via, entry["key"], method, path, result["status"], expect,
        ["%s %s %s" % (a["from"], a["path"], a["status"]) for a in arrived] or "-"))
    return entry


# The paths a client must not reach, each with its method and a body of the kind the engine takes there.
REFUSED = [
    ("POST", "/invocations", "chat"), ("POST", "/tokenize", {"model": SERVED, "prompt": "hello"}),
    ("POST", "/detokenize", {"model": SERVED, "tokens": [1, 2, 3]}), ("GET", "/metrics", None), ("GET", "/load", None),
    ("GET", "/version", None), ("GET", "/ping", None), ("POST", "/ping", None), ("GET", "/is_scaling_elastic_ep", None),
    ("POST", "/is_scaling_elastic_ep", None), ("POST", "/scale_elastic_ep", {"new_data_parallel_size": 2}),
    ("POST", "/v1/..\\invocations", "chat"), ("POST", "/v1/%2e%2e/invocations", "chat"),
    ("POST", "/v1/%252e%252e/tokenize", {"model": SERVED, "prompt": "hello"}),
    ("POST", "/v1/chat/completions/../../invocations", "chat"),
    ("POST", "/v1/chat/completions%2f..%2f..%2finvocations", "chat"), ("POST", "/v1/chat/completions/..%5c..%5cinvocations", "chat"),
    ("POST", "/v1/chat/completions\\..\\..\\invocations", "chat"), ("POST", "//invocations", "chat"),
    ("POST", "/%69nvocations", "chat"), ("POST", "/V1/CHAT/COMPLETIONS", "chat"), ("POST", "/v1/chat/completions/", "chat"),
    ("POST", "/v1/chat/completions;/../../invocations", "chat"), ("GET", "/v1/models/../../metrics", None),
    ("GET", "/docs", None), ("GET", "/openapi.json", None), ("POST", "/v1/embeddings", {"model": SERVED, "input": "x"}),
    ("POST", "/pooling", {"model": SERVED, "input": "x"}), ("POST", "/classify", {"model": SERVED, "input": "x"}),
    ("POST", "/score", {"model": SERVED, "text_1": "a", "text_2": "b"}), ("POST", "/rerank", {"model": SERVED}),
    ("POST", "/v1/audio/transcriptions", None), ("POST", "/v1/messages", "chat"),
    ("POST", "/inference/v1/generate", {"token_ids": [1, 2]}), ("POST", "/v2/chat/completions", "chat"),
    ("POST", "/reset_prefix_cache", None), ("POST", "/sleep", None), ("POST", "/wake_up", None),
    ("POST", "/collective_rpc", {"method": "x"}), ("GET", "/server_info", None), ("POST", "/start_profile", None),
    ("GET", "/v1/chat/completions", None),
]


def run_cases(image):
    good_key = CLIENTS["alice"]
    chat = chat_body()
    for method, path, body in REFUSED:
        body = chat if body == "chat" else body
        want = 405 if path == "/v1/chat/completions" else 404
        case("refused", method, path, body, None, expect=want)
        case("refused", method, path, body, good_key, expect=want)
    # The allow-list: no key, a wrong key and the internal key are 401 at the front; a client key goes through.
    for key, name in ((None, "no key"), ("sk-not-a-client-key-0123456789", "wrong key"), (INTERNAL_KEY, "internal key")):
        case("allowed route, " + name, "POST", "/v1/chat/completions", chat, key, expect=401)
    case("allowed route, no key", "GET", "/v1/models", None, None, expect=401)
    case("health, no key", "GET", "/health", None, None, expect=200)
    case("models", "GET", "/v1/models", None, good_key, expect=200)
    case("chat", "POST", "/v1/chat/completions", chat, good_key, expect=200)
    case("chat, the second client's key", "POST", "/v1/chat/completions", chat, CLIENTS["ci.bot"], expect=200)
    case("chat, a query and dot segments after the route", "POST", "/v1/chat/completions?x=/../../invocations", chat,
         good_key, expect=200)
    case("chat, dot segments that resolve to the route", "POST", "/v1/models/../chat/completions", chat, good_key,
         expect=200)
    case("streamed chat", "POST", "/v1/chat/completions", chat_body("Count to twenty.", max_tokens=24, stream=True),
         good_key, expect=200, stream=True)
    text_only = case("text chat (the image chat's base)", "POST", "/v1/chat/completions",
                     chat_body([{"type": "text", "text": "Describe this."}]), good_key, expect=200)
    img = case("image chat (data URL PNG 64 x 64)", "POST", "/v1/chat/completions",
               chat_body([prompts.image_url_part(image), {"type": "text", "text": "Describe this."}]), good_key,
               expect=200)
    if img["status"] == text_only["status"] == 200:
        img["media_tokens"] = img["usage"]["prompt_tokens"] - text_only["usage"]["prompt_tokens"]
        log("the image added %s prompt tokens" % img["media_tokens"])
    case("completions", "POST", "/v1/completions", {"model": SERVED, "prompt": "Hello", "max_tokens": 4}, good_key,
         expect=200)
    case("responses", "POST", "/v1/responses", {"model": SERVED, "input": "Say hello.", "max_output_tokens": 16},
         good_key, expect=200)
    # Straight at the engine (what the front is there for): vLLM's key guards /v1 only.
    # (/scale_elastic_ep is left out here: it would act.)
    for method, path, body in REFUSED[:10]:
        case("direct, no key", method, path, chat if body == "chat" else body, None, via="engine", expect=200)
    case("direct, no key", "POST", "/v1/chat/completions", chat, None, via="engine", expect=401)
    case("direct, internal key", "POST", "/v1/chat/completions", chat, INTERNAL_KEY, via="engine", expect=200)


def judge():
    lines = engine_lines()
    through = [(m, p, int(s)) for a, m, p, s in lines if a == NGINX_ADDR]
    direct = [(m, p, int(s)) for a, m, p, s in lines if a == DIRECT_ADDR]
    counts = {}
    for m, p, s in through:
        counts["%s %s %d" % (m, p, s)] = counts.get("%s %s %d" % (m, p, s), 0) + 1
    outside = sorted({p for _m, p, _s in through if p not in ALLOWED})
    refused = [c for c in CASES if c["via"] == "front" and c["expect"] != 200]
    allowed = [c for c in CASES if c["via"] == "front" and c["expect"] == 200]
    RESULTS["cases"] = CASES
    RESULTS["vllm_log"] = {"lines": len(lines), "from_the_front": len(through), "straight": len(direct),
                           "other_addresses": sorted({a for a, _m, _p, _s in lines} - {NGINX_ADDR, DIRECT_ADDR}),
                           "through_the_front": counts, "outside_the_allow_list_through_the_front": outside}
    RESULTS["verdict"] = {
        "refused_cases": len(refused), "refused_ok": sum(c["ok"] for c in refused),
        "refused_not_ok": [(c["method"], c["path"], c["key"], c["status"], c["arrived"]) for c in refused if not c["ok"]],
        "allowed_ok": sum(c["ok"] for c in allowed), "allowed_cases": len(allowed),
        "allowed_not_ok": [(c["name"], c["status"], c.get("body", "")[:120]) for c in allowed if not c["ok"]],
        "direct": [(c["method"], c["path"], c["key"], c["status"]) for c in CASES if c["via"] == "engine"],
        "nothing_outside_the_allow_list_arrived": not outside and bool(through),
    }
    # Straight at the engine is the contrast, not the test.
    RESULTS["ok"] = not outside and all(c["ok"] for c in CASES if c["via"] == "front") and bool(through)


def table():
    """front-vllm.md: path x (no key, client key) through the front, and straight at the engine."""
    rows, seen = [], {}
    for c in CASES:
        if c["name"] != "refused":
            continue
        row = seen.setdefault((c["method"], c["path"]), {"method": c["method"], "path": c["path"]})
        row[c["key"]] = "%s%s" % (c["status"], "" if not c["arrived"] else " ARRIVED")
    direct = {(c["method"], c["path"]): c["status"] for c in CASES if c["via"] == "engine" and c["key"] == "none"}
    lines = ["| method | path | front, no key | front, client key | engine straight, no key |", "|---|---|---|---|---|"]
    for (method, path), row in seen.items():
        cells = (method, path.replace("|", "\\|"), row.get("none"), row.get("alice"), direct.get((method, path), ""))
        rows.append("| %s | `%s` | %s | %s | %s |" % cells)
    lines += rows + ["", "| request through the front | key | status | arrived at vLLM (from the front) |", "|---|---|---|---|"]
    for c in CASES:
        if c["name"] != "refused" and c["via"] == "front":
            arrived = ", ".join("%s %s" % (a["path"], a["status"]) for a in c["arrived"]) or "nothing"
            lines.append("| %s: %s `%s` | %s | %s | %s |" % (c["name"], c["method"], c["path"], c["key"], c["status"], arrived))
    with open(os.path.join(OUT, "front-vllm.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    RESULTS["machine"] = machine()
    log("machine %s" % RESULTS["machine"])
    if FRONT_DEBS:
        RESULTS["debs"] = unpack_front()
        log("unpacked %s" % RESULTS["debs"])
    settings = settings_for()
    render_front(settings)
    front, front_log = start_front()
    log("nginx %s (%s)" % (RESULTS["nginx"]["version"][:1], RESULTS["nginx"]["runner"]))
    try:
        RESULTS["before_the_engine"] = {"health": request("GET", "/health"),
                                        "chat": request("POST", "/v1/chat/completions", chat_body(), CLIENTS["alice"])}
        log("the front before the engine is up: %s" % {k: v["status"] for k, v in RESULTS["before_the_engine"].items()})
        RESULTS["model"] = write_folder()
        attempts = RESULTS["engine_attempts"] = []
        proc = None
        for drafter in [settings["llm_drafter"]] + (["off"] if settings["llm_drafter"] != "off" else []):
            rendered = render_engine(settings_for(llm_drafter=drafter))
            proc, logf, healthy = start_engine(rendered, "drafter " + drafter)
            attempts.append({"drafter": drafter, "command": rendered["display"], "env": sorted(rendered["env"]),
                             "healthy_after_s": healthy, "failed": None if proc else logf})
            log("engine (drafter %s): %s" % (drafter, "healthy after %s s" % healthy if proc else logf))
            save()
            if proc:
                break
        if not proc:
            raise SystemExit("vLLM did not serve")
        try:
            if MEDIA:
                run_bad_media(proc)
            else:
                run_cases(prompts.png((220, 30, 30), 64))
        finally:
            stop(proc, logf, signal.SIGINT)
    finally:
        stop(front, front_log, signal.SIGQUIT)
        if MEDIA:
            judge_media()
            table_media()
        else:
            judge()
            table()
        save()
    log("verdict %s" % json.dumps(RESULTS["verdict"], default=str)[:1500])
    log("ok %s" % RESULTS["ok"])


# -- bad media through the front (issue 39 item 2) ------------------------------------------------------

def front_lines():
    """The front's access log so far: one dict a request."""
    with open(FRONT_LOG, errors="replace") as f:
        text = f.read()
    keys = ("addr", "client", "time", "method", "uri", "status", "request_length", "bytes_sent", "seconds",
            "upstream", "path")
    return [dict(zip(keys, m.groups())) for m in FRONT_ACCESS.finditer(text)]


def nest(depth, inner):
    """`inner` inside depth - 1 lists: a JSON value `depth` levels deep where inner is a list or object."""
    for _i in range(depth - 1):
        inner = [inner]
    return inner


def deep_schema(levels):
    """A JSON schema of objects nested `levels` deep (two JSON levels each: the object and its properties)."""
    schema = {"type": "string"}
    for i in range(levels):
        schema = {"type": "object", "properties": {"k%d" % i: schema}}
    return schema


def media_cases():
    """(name, where it comes from, body or raw bytes, expect, why): the catalogue, then the front's own cases."""
    from ansible_collections.gpuserve.llm.plugins.module_utils import bad_media
    item = RESULTS["front"]["limits"]["front_media_item_mib"] * 1048576
    out = []
    catalogue = bad_media.cases()
    for c in [x for x in catalogue if not x["lethal"]]:
        out.append((c["name"], "catalogue", chat_body(c["parts"] + [{"type": "text", "text": "Describe this."}],
                                                      max_tokens=1), c["expect"], c["why"]))
    colours = [(220, 30, 30), (30, 170, 60), (30, 70, 220), (230, 200, 40), (150, 60, 170)]
    five = [prompts.image_url_part(prompts.png(rgb, 64)) for rgb in colours]
    out += [
        ("five-distinct-images", "front", chat_body(five + [{"type": "text", "text": "Describe these."}], max_tokens=1),
         "4xx", "five different 64 x 64 PNGs where the engine takes %d" % bad_media.LIMIT_IMAGES),
        ("oversize-video-data-url", "front",
         chat_body([prompts.video_url_part(bad_media.good_avi() + b"\0" * (item + 1 - len(bad_media.good_avi()))),
                    {"type": "text", "text": "What happens?"}], max_tokens=1), "4xx",
         "a valid AVI padded to %d bytes (front_media_item_mib + 1 byte) in a video_url part" % (item + 1)),
        ("oversize-data-url-no-base64", "front",
         chat_body([prompts.image_url_part("data:image/png," + "A" * (item + 1)),
                    {"type": "text", "text": "Describe this."}], max_tokens=1), "4xx",
         "a data URL without ;base64 of %d characters after the comma (the front counts its length)" % (item + 1)),
        ("oversize-data-url-in-text", "front",
         chat_body([{"type": "text", "text": "data:image/png;base64," + base64.b64encode(
             bad_media.oversize_png(item + 1)).decode()}], max_tokens=1), "4xx",
         "the catalogue's oversize PNG as a data URL in a text part (the item cap applies to data: URLs anywhere)"),
        ("not-json", "front", b"this is not JSON {\"model\": ", "4xx", "a body that is not JSON"),
        ("empty-body", "front", b"", "4xx", "a POST with no body"),
        ("json-array", "front", json.dumps([chat_body()]).encode(), "4xx", "a JSON array, not an object"),
        ("deep-40-with-image", "front",
         dict(chat_body([prompts.image_url_part(prompts.png((220, 30, 30), 64)),
                         {"type": "text", "text": "Describe this."}], max_tokens=1), x=nest(40, [])), "4xx",
         "an image chat with a value 40 levels deep beside it (njs reads 32)"),
        ("deep-40-no-media", "front",
         chat_body("Say hello.", tools=[{"type": "function", "function": {
             "name": "deep", "description": "a deep schema", "parameters": deep_schema(20)}}]), "no-5xx",
         "a text chat with a tool whose parameters nest 41 JSON levels: no media, shorter than an item, so the "
         "front sends it on unread (the engine decides)"),
    ]
    for c in [x for x in catalogue if x["lethal"]]:
        out.append((c["name"], "catalogue", chat_body(c["parts"] + [{"type": "text", "text": "Describe this."}],
                                                      max_tokens=1), c["expect"], c["why"]))
    return out


def run_bad_media(proc):
    """Each case through the front with a client key, then /health and a text chat through the front."""
    key = CLIENTS["alice"]
    cases = RESULTS["media_cases"] = []
    base = request("POST", "/v1/chat/completions", chat_body("Describe this.", max_tokens=1), key)
    log("text chat through the front before the cases: %s" % base["status"])
    for name, origin, body, expect, why in media_cases():
        if DEADLINE - (time.time() - T0) < 25:
            RESULTS.setdefault("skipped", []).append(name)
            continue
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        mark_e, mark_f = len(engine_lines()), len(front_lines())
        result = request("POST", "/v1/chat/completions", None, key, raw=raw, timeout=300)
        time.sleep(0.2)
        arrived = [{"from": a, "method": m, "path": p, "status": int(s)} for a, m, p, s in engine_lines()[mark_e:]]
        front = [f for f in front_lines()[mark_f:] if f["addr"] == CLIENT_ADDR]
        after = {"health": request("GET", "/health", key=key)["status"],
                 "chat": request("POST", "/v1/chat/completions", chat_body("Still there?"), key)["status"]}
        status = result["status"]
        if expect == "no-5xx":
            ok = status is not None and status < 500
        else:
            ok = status is not None and 400 <= status < 500
        reached = [a for a in arrived if a["from"] == NGINX_ADDR and a["path"] == "/v1/chat/completions"]
        entry = {"name": name, "origin": origin, "expect": expect, "why": why, "bytes": len(raw),
                 "status": status, "message": result.get("message", ""), "seconds": result["seconds"],
                 "reached_vllm": bool(reached), "vllm_log": arrived,
                 "front_log": [{k: f[k] for k in ("status", "upstream", "path", "request_length", "seconds")}
                               for f in front],
                 "after": after, "served_after": after == {"health": 200, "chat": 200},
                 "engine_alive": proc.poll() is None}
        if status == 200:
            entry["body"] = result.get("body", "")[:200]
        entry["ok"] = ok and entry["served_after"]
        cases.append(entry)
        log("%-28s %s in %.2f s, vLLM %s, front upstream=%s; after %s: %s" % (
            name, status, result["seconds"], ["%s %s" % (a["path"], a["status"]) for a in reached] or "-",
            [f["upstream"] for f in front] or "?", after, entry["message"][:150]))
        save()
    RESULTS["engine_alive_after"] = proc.poll() is None
    RESULTS["direct_health_after"] = request("GET", "/health", via="engine")["status"]


def judge_media():
    cases = RESULTS.get("media_cases", [])
    RESULTS["verdict"] = {
        "cases": len(cases), "ok": sum(c["ok"] for c in cases),
        "not_ok": [(c["name"], c["status"], c["message"][:120], c["after"]) for c in cases if not c["ok"]],
        "5xx": [c["name"] for c in cases if c["status"] is None or c["status"] >= 500],
        "refused_at_the_front": [c["name"] for c in cases if c["status"] != 200 and not c["reached_vllm"]],
        "refused_by_vllm": [c["name"] for c in cases if c["status"] != 200 and c["reached_vllm"]],
        "served": [c["name"] for c in cases if c["status"] == 200],
        "engine_alive_after": RESULTS.get("engine_alive_after"), "skipped": RESULTS.get("skipped", []),
    }
    RESULTS["ok"] = bool(cases) and all(c["ok"] for c in cases) and RESULTS.get("engine_alive_after") is True


def table_media():
    lines = ["| case | from | status | message | reached vLLM (its access log) | front's log | served after |",
             "|---|---|---|---|---|---|---|"]
    for c in RESULTS.get("media_cases", []):
        vllm_seen = ", ".join("%s %s" % (a["path"], a["status"]) for a in c["vllm_log"] if a["from"] == NGINX_ADDR)
        front = ", ".join("%s upstream=%s" % (f["status"], f["upstream"]) for f in c["front_log"]) or "?"
        lines.append("| `%s` | %s | %s | %s | %s | %s | %s |" % (
            c["name"], c["origin"], c["status"], (c["message"] or ("(%s)" % c.get("body", "")[:80])).replace(
                "|", "/")[:220], "yes: " + vllm_seen if c["reached_vllm"] else "no", front,
            "yes" if c["served_after"] else "NO %s" % c["after"]))
    with open(os.path.join(OUT, NAME + ".md"), "w") as f:
        f.write("\n".join(lines) + "\n")


# -- a stub engine for the dry run: vLLM's routes and key rule, uvicorn's access lines ------------------

def stub():
    import http.server

    class Stub(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, status, obj, stream=False):
            print('(APIServer pid=%d) INFO:     %s:%d - "%s %s HTTP/1.1" %d' % (
                os.getpid(), self.client_address[0], self.client_address[1], self.command,
                self.path.split("?")[0], status), flush=True)
            if stream:
                self.send_response(status)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for i in range(5):
                    self.wfile.write(b'data: {"choices": [{"delta": {"content": "%d "}}]}\n\n' % i)
                    self.wfile.flush()
                    time.sleep(0.05)
                self.wfile.write(b"data: [DONE]\n\n")
                self.close_connection = True
                return
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def handle_any(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            path = self.path.split("?")[0]
            guarded = path.startswith(("/v1", "/v2", "/inference"))
            if guarded and self.headers.get("Authorization") != "Bearer " + os.environ["VLLM_API_KEY"]:
                return self.reply(401, {"error": "Unauthorized"})
            if path in ("/health", "/ping", "/version", "/metrics", "/load", "/is_scaling_elastic_ep", "/v1/models",
                        "/tokenize", "/detokenize"):
                return self.reply(200, {})
            if path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/invocations"):
                media = sum(len(str(m.get("content"))) // 100 for m in body.get("messages", []))
                return self.reply(200, {"usage": {"prompt_tokens": 10 + media}}, stream=body.get("stream", False))
            return self.reply(404, {"detail": "Not Found"})

        do_GET = do_POST = do_HEAD = handle_any

    http.server.ThreadingHTTPServer(("127.0.0.1", ENGINE_PORT), Stub).serve_forever()


if MODE == "stub":
    stub()
elif MODE in ("run", "dry", "bad-media", "dry-bad-media"):
    main()
else:
    raise SystemExit("unknown mode %s" % MODE)
