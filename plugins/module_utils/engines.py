# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Engine profiles: how each engine's image is had, which endpoint means healthy, where its
KV-pool figures come from, and how its command line is rendered (templates/<engine>.j2).

The command templates are plain Jinja2 so that a reader sees the flags. Rendering gives three
things: the argv for the container, its environment (where secrets go: never on argv), and the
command as a person would type it, with secrets shown as <variable name>.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re
import shlex

# The OpenAI routes a front forwards to an engine (roles/front), each with its methods; every other path
# is refused there. vLLM and SGLang serve the Responses API too; llama-server 0.7.0 does not.
CHAT_ROUTES = {"/v1/chat/completions": ["POST"], "/v1/completions": ["POST"], "/v1/models": ["GET", "HEAD"]}

PROFILES = {
    "vllm": {
        "version": "0.26.0",
        # The image names the version; pin its digest in llm_image (docs/service.md).
        "image": "vllm/vllm-openai:v0.26.0",
        "template": "vllm.j2",
        "gpu": True,
        "health": {"path": "/health", "status": 200},
        "pool": {"path": "/metrics", "parser": "vllm_metrics"},
        # What the drain counts (plugins/modules/engine_drain.py): the requests scheduled and those waiting.
        "running": {"path": "/metrics", "metrics": ["vllm:num_requests_running", "vllm:num_requests_waiting"]},
        "api_key_env": "VLLM_API_KEY",  # the variable the template gives the key in
        "front_routes": dict(CHAT_ROUTES, **{"/v1/responses": ["POST"]}),
        # The media items a request may carry (vLLM's --limit-mm-per-prompt; the front counts them too).
        "media_per_request": {"image": 4, "video": 1},
    },
    "sglang": {
        "version": "0.5.5",
        "image": "lmsysorg/sglang:v0.5.5",
        "template": "sglang.j2",
        "gpu": True,
        "health": {"path": "/health", "status": 200},
        "pool": {"path": "/get_server_info", "parser": "sglang_server_info"},
        "running": {"path": "/metrics", "metrics": ["sglang:num_running_reqs", "sglang:num_queue_reqs"]},
        "api_key_env": "GPUSERVE_API_KEY",  # SGLang takes --api-key only: its template passes it through a shell
        "front_routes": dict(CHAT_ROUTES, **{"/v1/responses": ["POST"]}),
        # SGLang 0.5.5 has no per-request limit of its own: the front's count is the only one. No video: it
        # decodes every frame into memory in its HTTP server's process (decord), unsampled.
        "media_per_request": {"image": 4, "video": 0},
        "no_video": "SGLang 0.5.5 decodes every frame of a video into memory in its HTTP server's process (a 38 KB "
                    "600-frame 1080p H.264 took 3.7 GB of arrays, 8.4 GB at peak): the front refuses video on "
                    "SGLang; images only",
    },
    "llamacpp": {
        "version": "Debian llama.cpp-tools",
        "image": "",  # built from Debian's packages by the image stage
        "template": "llamacpp.j2",
        "gpu": False,
        "health": {"path": "/health", "status": 200},
        "pool": {"path": "/slots", "parser": "llamacpp_slots"},
        # Slots processing and requests deferred for want of a slot, from one pass of the server's loop
        # (--metrics); /slots shows only the slots, not the requests waiting for one.
        "running": {"path": "/metrics", "metrics": ["llamacpp:requests_processing", "llamacpp:requests_deferred"]},
        "api_key_env": "LLAMA_API_KEY",
        "front_routes": CHAT_ROUTES,
        # llama-server 0.7.0 counts no media and caps no item: the front's count is the only one.
        "media_per_request": {"image": 4, "video": 0},
        # What verify's video_input reports instead of running (libmtmd decodes video by running ffmpeg).
        "no_video": "llama.cpp 0.7.0 decodes video with ffmpeg and ffprobe, which the engine image does not have: "
                    "images only",
    },
}

SECRET = "@@SECRET:%s@@"
SECRET_RE = re.compile(r"@@SECRET:([a-z_]+)@@")
ENV_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
# What vLLM's --allowed-media-domains gets for data: URLs only. vLLM compares a URL's host with the
# list before it fetches, and data: URLs never reach the list. No host can equal this value (a "/"
# ends a URL's host), so every http(s) URL is refused unfetched. "invalid" (RFC 2606) would let
# http://invalid/ through to the resolver, where a search domain can make it a real host.
NO_MEDIA_DOMAIN = "data-urls-only/"


def to_json(value):
    return json.dumps(value, separators=(", ", ": "), sort_keys=False)


def render(template_text, context, secrets):
    """Render a command template. `secrets`: {variable name: value}; they may appear only in env lines.

    Returns {"argv", "env", "display", "env_shown", "secret_env"}: env_shown is env with each secret as
    <variable name> (what may be hashed or shown), secret_env the names of the variables holding one.
    """
    from jinja2 import Environment, StrictUndefined  # the controller's Jinja2 (ansible-core's)

    env = Environment(undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    env.filters["json"] = lambda v: shlex.quote(to_json(v))
    env.globals["secret"] = lambda name: SECRET % name
    text = env.from_string(template_text).render(**context)
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    environment, shown_env, argv, display = {}, {}, [], []
    for line in lines:
        m = ENV_LINE.match(line)
        if m and not argv:
            name, value = m.group(1), " ".join(shlex.split(m.group(2))) if m.group(2) else ""
            environment[name] = SECRET_RE.sub(lambda s: str(secrets.get(s.group(1), "")), value)
            shown_env[name] = SECRET_RE.sub(lambda s: "<%s>" % s.group(1), value)
            display.append("%s=%s" % (name, SECRET_RE.sub(lambda s: "<%s>" % s.group(1), m.group(2))))
            continue
        if SECRET_RE.search(line):
            raise ValueError("a secret would land on the command line: %s" % SECRET_RE.sub("<secret>", line))
        argv.extend(shlex.split(line))
        display.append(line)
    shown = " \\\n  ".join(display[len(environment):])
    prefix = "".join("%s \\\n" % d for d in display[:len(environment)])
    return {"argv": argv, "env": environment, "display": prefix + shown + "\n", "env_shown": shown_env,
            "secret_env": sorted(n for n in environment if environment[n] != shown_env[n])}


def command_context(settings, paths, facts=None):
    """What a template sees: the llm_ settings, the container paths, and values derived from them."""
    facts = facts or {}
    ctx = dict(settings)
    ctx.update(paths)
    gpus = settings.get("llm_gpus") or []
    ctx["tp"] = len(gpus)
    total = facts.get("gpu_memory_total_mib")
    ctx["gpu_memory_fraction"] = (
        round(1 - settings.get("llm_reserve_gib", 0) * 1024.0 / total, 4) if total else None)
    ctx["kv_cache_bytes"] = int(settings.get("llm_kv_cap_gib", 0) * 1024 ** 3)
    media = settings.get("llm_media_urls")
    ctx["media_domains"] = ([NO_MEDIA_DOMAIN] if media == "data_only" else [] if media == "any" else list(media or []))
    ctx["media_domains_listed"] = isinstance(media, list) and bool(media)
    ctx["media_per_request"] = PROFILES.get(settings.get("llm_engine"), {}).get("media_per_request", {})
    drafter = settings.get("llm_drafter")
    ctx["drafter_kind"] = drafter if drafter in ("mtp", "ngram", "off") else "model"
    ctx["api_key_set"] = bool(settings.get("llm_api_key"))
    ctx["chat_template_kwargs"] = {"enable_thinking": bool(settings.get("llm_thinking"))}
    if settings.get("llm_thinking"):
        ctx["chat_template_kwargs"]["reasoning_effort"] = settings.get("llm_reasoning_effort")
    return ctx


# The flags that turn drafting on, with how many values each takes: taking them out of a drafted
# command gives the same configuration undrafted (tests/unit check this against the templates).
DRAFTER_FLAGS = {
    "vllm": {"--speculative-config": 1},
    "sglang": {"--speculative-algorithm": 1, "--speculative-num-steps": 1, "--speculative-eagle-topk": 1,
               "--speculative-num-draft-tokens": 1, "--speculative-draft-model-path": 1},
    "llamacpp": {"--model-draft": 1, "--spec-type": 1},
}


def undrafted_argv(argv, engine, port=None):
    """The engine's argv without its drafter (and on another port when given): the undrafted twin that
    verify compares drafted replies with, since no engine here turns drafting off per request."""
    flags = DRAFTER_FLAGS[engine]
    out, skip = [], 0
    for i, arg in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if arg in flags:
            skip = flags[arg]
            continue
        if port is not None and i > 0 and argv[i - 1] == "--port":
            arg = str(port)
        out.append(arg)
    return out


# Pool figures: how many KV tokens the engine's pool holds, and how many are free now.

def _prom_samples(text, name):
    """(labels, value) for each sample of metric `name` in Prometheus text format."""
    out = []
    pattern = re.compile(r"^%s(\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)" % re.escape(name))
    for line in text.splitlines():
        m = pattern.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group("labels") or ""))
            out.append((labels, float(m.group("value"))))
    return out


def prom_total(text, name):
    """The sum of metric `name` over every label set (0.0 when the engine does not report it)."""
    return sum(value for _labels, value in _prom_samples(text, name))


# The engines' counters of drafted and of accepted draft tokens (verify and bench read them around a
# set of requests).
DRAFT_ACCEPTED = ["llamacpp:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_accepted_tokens_total"]
DRAFT_TOKENS = ["llamacpp:spec_decode_num_draft_tokens_total", "vllm:spec_decode_num_draft_tokens_total"]


def draft_counts(before, after):
    """(accepted, drafted) draft tokens between two readings of the engine's /metrics."""
    def delta(names):
        return sum(prom_total(after, n) - prom_total(before, n) for n in names)
    return delta(DRAFT_ACCEPTED), delta(DRAFT_TOKENS)


def pool_vllm_metrics(metrics_text):
    """vLLM /metrics: vllm:cache_config_info{num_gpu_blocks, block_size} and vllm:kv_cache_usage_perc."""
    info = _prom_samples(metrics_text, "vllm:cache_config_info")
    if not info:
        return None
    labels = info[0][0]
    pool = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    usage = _prom_samples(metrics_text, "vllm:kv_cache_usage_perc")
    used = max(v for _labels, v in usage) if usage else 0.0
    return {"pool_tokens": pool, "free_tokens": int(round(pool * (1 - used)))}


def pool_sglang_server_info(server_info, metrics_text=""):
    """SGLang /get_server_info: max_total_num_tokens; free from /metrics sglang:token_usage when given."""
    pool = server_info.get("max_total_num_tokens")
    if pool is None:
        states = server_info.get("internal_states") or [{}]
        pool = states[0].get("max_total_num_tokens")
    if pool is None:
        return None
    usage = _prom_samples(metrics_text, "sglang:token_usage") if metrics_text else []
    used = max(v for _labels, v in usage) if usage else 0.0
    return {"pool_tokens": int(pool), "free_tokens": int(round(pool * (1 - used)))}


def pool_llamacpp_slots(slots):
    """llama.cpp /slots: each slot's n_ctx; a slot that is processing has n_past of it in use."""
    if not isinstance(slots, list) or not slots:
        return None
    pool = sum(int(s.get("n_ctx", 0)) for s in slots)
    busy = 0
    for s in slots:
        if s.get("is_processing"):
            busy += int(s.get("n_past") or (s.get("next_token") or [{}])[0].get("n_decoded", 0) or 0)
    return {"pool_tokens": pool, "free_tokens": max(0, pool - busy)}


def pool_figures(parser, text):
    """The pool figures from the text of the engine's pool endpoint (PROFILES[...]["pool"]["parser"]),
    or None when the engine does not say."""
    try:
        if parser == "vllm_metrics":
            return pool_vllm_metrics(text)
        body = json.loads(text)
        if parser == "sglang_server_info":
            return pool_sglang_server_info(body)
        return pool_llamacpp_slots(body)
    except (ValueError, KeyError, TypeError):
        return None


def running_requests(engine, text):
    """How many requests the engine holds (running, and queued for a slot or a batch), from the text of
    PROFILES[engine]["running"]["path"]; None when the text does not say (its first metric is missing)."""
    names = PROFILES[engine]["running"]["metrics"]
    try:
        found = [_prom_samples(text, name) for name in names]
        if not found[0]:
            return None
        return int(sum(v for samples in found for _labels, v in samples))
    except (ValueError, TypeError, AttributeError):
        return None
