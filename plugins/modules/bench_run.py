#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: bench_run
short_description: The recipe's decode, prefill and prompt-reuse tables, measured against served engines
version_added: "0.1.0"
description:
  - Runs on the host against one or more OpenAI-compatible endpoints (several for a side-by-side run), one after
    the other. Decode at each concurrency for prose, structured and code prompts (distinct prompts, greedy, a fixed
    reply length) - aggregate tok/s, median per-request tok/s, median time to first token. Prefill of cold prompts
    (each with its own prefix) - tok/s and time to first token. Prompt reuse - a conversation's turns against a cold
    prompt as long as its last turn.
  - Timing is the client's, from the stream; the engine's own figures are given beside where it reports them, and
    the client's CPU use for every row.
  - Every row is warmed up first with a pass of its own shape that is not timed (the row's concurrency and prompt
    kind; a cold prompt of the row's size; a whole conversation), then measured O(repeats) times with prompts of
    each pass's own; a row's figures are the medians over the passes, with each one's range (lowest and highest
    pass) beside, and the passes and the warm-up's figures are kept in the row.
  - Fails with E_ENDPOINT when an endpoint does not answer, E_BENCH when a measurement's requests fail.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
  - gpuserve.llm.tls_client
attributes:
  check_mode:
    support: none
    details: Sends requests for minutes; in check mode the bench role says what it would measure instead.
  diff_mode:
    support: none
options:
  endpoints:
    description: The endpoints, measured one after the other.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The endpoint's name in the report.
        type: str
        required: true
      url:
        description: Its base URL as the host reaches it.
        type: str
        required: true
      api_key:
        description: Its API key (never shown).
        type: str
        default: ""
      model:
        description: Its served model name.
        type: str
        required: true
  concurrency:
    description: Concurrent requests of the decode rows.
    type: list
    elements: int
    default: [1, 2, 4, 8, 16]
  kinds:
    description: Prompt kinds of the decode rows.
    type: list
    elements: str
    default: [prose, structured, code]
  reply_tokens:
    description: Reply tokens of a decode request.
    type: int
    default: 400
  ignore_eos:
    description: Keep generating past the end of the reply, so that every reply has O(reply_tokens) tokens.
    type: bool
    default: true
  prefill_sizes:
    description: Cold prompt sizes in tokens.
    type: list
    elements: int
    default: [2048, 8192, 32768]
  prefill_reply_tokens:
    description: Reply tokens of a prefill request (the time to the first is what counts).
    type: int
    default: 8
  reuse_tokens:
    description: Tokens of the conversation's first turn for prompt reuse (0 - no reuse rows).
    type: int
    default: 32768
  reuse_turns:
    description: Turns of the conversation.
    type: int
    default: 5
  repeats:
    description: Timed passes of each row; its figures are their medians, with the range beside.
    type: int
    default: 3
  warmup:
    description: Send each row's shape once, not timed, before its timed passes (kernels compiled on first use).
    type: bool
    default: true
  timeout:
    description: Seconds one request may take.
    type: int
    default: 1800
  progress_file:
    description: Where to write the step being measured (read by M(gpuserve.llm.job_progress)); empty for none.
    type: path
    default: ""
  gpus:
    description: The GPUs the first endpoint's engine runs on (NVML indices), for the memory-bandwidth bound; empty
      for a CPU engine (no bound then).
    type: list
    elements: int
    default: []
  split:
    description: How the engine spreads the model over O(gpus) - C(tensor) (tensor parallel, the bandwidths add) or
      C(layer) (llama.cpp's layer split, the slowest GPU's counts).
    type: str
    choices: [tensor, layer]
    default: tensor
  model_args:
    description: The first endpoint's engine container's arguments (docker inspect's Args); the model they name
      under O(model_mounts) gives the bytes a token reads.
    type: list
    elements: str
    default: []
  model_mounts:
    description: That container's mounts as docker inspect gives them (Source and Destination of each).
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Measure the host's engine
  gpuserve.llm.bench_run:
    endpoints:
      - {name: recipe, url: "http://127.0.0.1:8020", api_key: "{{ llm_api_key }}", model: glm-4.6v}
    concurrency: [1, 4, 16, 64]
    prefill_sizes: [2048, 8192, 32768]
  register: bench_result
"""

RETURN = r"""
endpoints:
  description: Per endpoint - name, url, models, decode rows, prefill rows, reuse, seconds. Each row holds its
    medians, their C(range) (lowest and highest pass), its C(passes) and its C(warmup) figures.
  returned: always
  type: list
  elements: dict
client:
  description: The machine the client ran on - CPU model and count.
  returned: always
  type: dict
bound:
  description: One request's memory-bandwidth bound for the first endpoint (C(tok_s), C(gb_s), C(bytes) a token
    reads, its C(parts), and how each was read), or C(unknown) with the reason. That endpoint's decode rows hold
    C(pct_of_bound), their median per-request tok/s as a percentage of it.
  returned: always
  type: dict
"""

import json
import os
import platform
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils import bench, bound
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError
from ansible_collections.gpuserve.llm.plugins.module_utils.progress import StepFile


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except (IOError, OSError):
        pass
    return platform.processor() or "unknown"


def decode_bound(p):
    """The first endpoint's one-request bound; where a part is not known, {unknown: why} and what is."""
    out, why = {}, []
    try:
        model = bound.model_bytes(bound.served_model_path(p["model_args"], p["model_mounts"]))
        out.update(bytes=model["bytes"], parts=model["parts"], model=model["how"])
    except bound.Unknown as e:
        model = None
        why.append(str(e))
    try:
        try:
            import pynvml
        except ImportError:
            pynvml = None
            if p["gpus"]:
                raise bound.Unknown("nvidia-ml-py is not installed in the host's virtualenv")
        bandwidth = bound.nvml_bandwidth(pynvml, p["gpus"], p["split"])
        out.update(gb_s=bandwidth["gb_s"], bandwidth=bandwidth["how"])
    except bound.Unknown as e:
        bandwidth = None
        why.append(str(e))
    if why:
        out["unknown"] = "; ".join(why)
        return out
    return bound.decode_bound(bandwidth, model)


def progress_steps(p):
    """A step a pass: the warm-up and each timed pass of every row, for every endpoint."""
    rows = len(p["kinds"]) * len(p["concurrency"]) + len(p["prefill_sizes"])
    rows += 1 if p["reuse_turns"] > 1 and p["reuse_tokens"] > 0 else 0
    return len(p["endpoints"]) * rows * (p["repeats"] + (1 if p["warmup"] else 0))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            endpoints=dict(type="list", elements="dict", required=True, options=dict(
                name=dict(type="str", required=True),
                url=dict(type="str", required=True),
                api_key=dict(type="str", default="", no_log=True),
                model=dict(type="str", required=True))),
            concurrency=dict(type="list", elements="int", default=[1, 2, 4, 8, 16]),
            kinds=dict(type="list", elements="str", default=["prose", "structured", "code"]),
            reply_tokens=dict(type="int", default=400, no_log=False),
            ignore_eos=dict(type="bool", default=True),
            prefill_sizes=dict(type="list", elements="int", default=[2048, 8192, 32768]),
            prefill_reply_tokens=dict(type="int", default=8, no_log=False),
            reuse_tokens=dict(type="int", default=32768, no_log=False),
            reuse_turns=dict(type="int", default=5),
            repeats=dict(type="int", default=3),
            warmup=dict(type="bool", default=True),
            timeout=dict(type="int", default=1800),
            tls_ca_file=dict(type="path", default=""),
            tls_verify=dict(type="bool", default=True),
            progress_file=dict(type="path", default=""),
            gpus=dict(type="list", elements="int", default=[]),
            split=dict(type="str", choices=["tensor", "layer"], default="tensor"),
            model_args=dict(type="list", elements="str", default=[]),
            model_mounts=dict(type="list", elements="dict", default=[]),
        ),
        supports_check_mode=False,
    )
    p = module.params
    tls = dict(ca_file=p["tls_ca_file"], verify=p["tls_verify"])
    bad = sorted(set(p["kinds"]) - {"prose", "structured", "code"})
    if bad or not p["concurrency"] or min(p["concurrency"]) < 1 or p["repeats"] < 1:
        message = ("bench_kinds must be among prose, structured, code (got %s), bench_concurrency positive "
                   "numbers (got %s) and bench_repeats 1 or more (got %s)"
                   % (", ".join(p["kinds"]), p["concurrency"], p["repeats"]))
        fail(module, "E_CONFIG", "bench settings", message)
    progress = StepFile(p["progress_file"], progress_steps(p))
    out = []
    for ep in p["endpoints"]:
        client = Client(ep["url"], ep["api_key"], ep["model"], p["timeout"], tls=tls)
        try:
            models = [m.get("id") for m in json.loads(client.get_text("/v1/models")).get("data", [])]
        except (EndpointError, ValueError) as e:
            message = "the endpoint %s does not answer for bench: %s" % (ep["name"], e)
            fail(module, "E_ENDPOINT", ep["url"], message)
        start = time.time()
        try:
            results = bench.Bench(client, p, log=lambda line, name=ep["name"]: progress("%s: %s" % (name, line))).run()
        except (EndpointError, KeyError, ValueError, TypeError) as e:
            message = "a measurement against %s failed: %s" % (ep["name"], e)
            fail(module, "E_BENCH", ep["url"], message)
        results.update(name=ep["name"], url=ep["url"], models=models, seconds=round(time.time() - start, 1))
        out.append(results)
    limit = decode_bound(p)
    for row in out[0]["decode"]:
        row["pct_of_bound"] = bound.percent(row.get("per_request_tok_s"), limit.get("tok_s"))
    module.exit_json(changed=False, endpoints=out, bound=limit,
                     client={"cpu_model": cpu_model(), "cpus": os.cpu_count(), "python": platform.python_version()})


if __name__ == "__main__":
    main()
