#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: verify_checks
short_description: The recipe's exactness and quality checks against a served engine, with counts
version_added: "0.1.0"
description:
  - Runs on the host, against the engine's OpenAI-compatible API. Exactness, greedy and within one configuration
    - concurrent replies equal solo replies; drafted replies equal those of an undrafted server of the same
    configuration (O(undrafted_url)); long prompts give the token hashes saved by the first run (O(saved_hashes)).
  - Media, when vision is on - images and video as data URLs accepted and counted in the prompt's tokens; a corrupt
    image or video, and an http URL O(media_urls) does not allow, refused with a client error while the engine goes on
    serving. These count with burn-in weights too.
  - Quality, with counts - tool calls (the right name and arguments that validate against the tool's schema), JSON
    by instruction only, JSON with response_format, needles in long prompts, images' colours (real weights), tool bursts
    with the default and the required tool choice.
  - Returns each check with passed, total, pass/fail/not_run and why. Quality checks do not count with burn-in
    weights (O(dummy)). Fails with E_ENDPOINT when the engine does not answer at all; failed checks are results,
    not module failures (the verify role decides).
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
  - gpuserve.llm.tls_client
attributes:
  check_mode:
    support: none
    details: Sends requests for minutes; in check mode the verify role says what it would check instead.
  diff_mode:
    support: none
options:
  url:
    description: The engine's base URL as the host reaches it.
    type: str
    required: true
  api_key:
    description: The API key (never shown).
    type: str
    default: ""
  model:
    description: The served model name.
    type: str
    required: true
  checks:
    description: The checks to run (the others are reported as not run).
    type: list
    elements: str
    default: [concurrent_solo, drafted_undrafted, long_prompt_hashes, image_input, video_input, tool_calls,
              json_instruction, json_response_format, needles, images, tool_bursts]
  drafter:
    description: The configuration's drafter (C(off) for none).
    type: str
    default: "off"
  undrafted_url:
    description: An undrafted server of the same configuration, for drafted = undrafted (empty for none).
    type: str
    default: ""
  engine_url:
    description:
      - The engine's own address, where its counters (/metrics) are read; a front serves no /metrics. Empty - O(url).
    type: str
    default: ""
  engine_api_key:
    description: The key the engine itself takes (the internal key), for its counters and the undrafted server.
    type: str
    default: ""
  undrafted_how:
    description: How the undrafted server came to be, for the report.
    type: str
    default: a second, undrafted server
  undrafted_missing:
    description: What the report says when there is no undrafted server.
    type: str
    default: no undrafted server to compare with
  dummy:
    description: Burn-in weights - quality checks run but do not count.
    type: bool
    default: false
  vision:
    description: Image input is on.
    type: bool
    default: false
  no_video:
    description: Why the engine serves no video though vision is on (the engine profile's C(no_video)); the video check
      is then not run, with this reason. Empty - video is served.
    type: str
    default: ""
  media_urls:
    description:
      - Which media URLs the engine accepts (llm_media_urls) - C(data_only), C(any), or a list of domains. Unless
        C(any), the media checks expect an http URL on a name that never resolves to be refused.
    type: raw
    default: data_only
  exact_prompts:
    description: Distinct prompts for concurrent = solo and drafted = undrafted.
    type: int
    default: 8
  exact_max_tokens:
    description: Reply tokens at most for the exactness prompts.
    type: int
    default: 64
  long_prompts:
    description: Long prompts whose reply token hashes are saved and compared.
    type: int
    default: 2
  long_prompt_tokens:
    description: Tokens of each long prompt.
    type: int
    default: 8192
  long_max_tokens:
    description: Reply tokens of each long prompt.
    type: int
    default: 32
  saved_hashes:
    description: The hashes saved by an earlier run of this configuration (empty - this run saves them).
    type: dict
    default: {}
  tool_calls:
    description: Tool-call requests.
    type: int
    default: 40
  tool_max_tokens:
    description: Reply tokens at most for a tool call.
    type: int
    default: 256
  json_instruction:
    description: JSON-by-instruction requests.
    type: int
    default: 20
  json_response_format:
    description: JSON requests with response_format json_schema.
    type: int
    default: 20
  json_max_tokens:
    description: Reply tokens at most for a JSON request.
    type: int
    default: 256
  needle_sizes:
    description: Prompt sizes for the needle check, in tokens or as fractions (<= 1) of O(context).
    type: list
    elements: float
    default: []
  context:
    description: Tokens a request may hold (prompt and reply), for sizes given as fractions.
    type: int
    default: 8192
  needle_depths:
    description: Where in the text the needle sits, as fractions.
    type: list
    elements: float
    default: [0.1, 0.5, 0.9]
  needle_max_tokens:
    description: Reply tokens at most for a needle question.
    type: int
    default: 32
  burst_size:
    description: Concurrent requests in one tool burst.
    type: int
    default: 10
  bursts:
    description: Bursts for each tool choice.
    type: int
    default: 3
  timeout:
    description: Seconds one request may take.
    type: int
    default: 900
  progress_file:
    description: Where to write the check running now (read by M(gpuserve.llm.job_progress)); empty for none.
    type: path
    default: ""
"""

EXAMPLES = r"""
- name: Run the checks on the host
  gpuserve.llm.verify_checks:
    url: http://127.0.0.1:8020
    api_key: "{{ llm_api_key }}"
    model: glm-4.6v
    drafter: mtp
    undrafted_url: http://127.0.0.1:9020
    needle_sizes: [32768, 65536, 120000]
  register: verify_result
"""

RETURN = r"""
checks:
  description: One entry a check - name, title, group, passed, total, status, counted, why, examples.
  returned: always
  type: list
  elements: dict
summary:
  description: The checks that passed, failed (counted), ran without counting, and did not run.
  returned: always
  type: dict
hashes:
  description: The long prompts' hashes to keep for this configuration.
  returned: always
  type: dict
engine_models:
  description: What the engine's /v1/models lists.
  returned: always
  type: list
  elements: str
seconds:
  description: How long the checks took.
  returned: always
  type: float
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils import verify
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client, EndpointError
from ansible_collections.gpuserve.llm.plugins.module_utils.progress import StepFile


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            model=dict(type="str", required=True),
            checks=dict(type="list", elements="str", default=list(verify.CHECKS)),
            drafter=dict(type="str", default="off"),
            undrafted_url=dict(type="str", default=""),
            engine_url=dict(type="str", default=""),
            engine_api_key=dict(type="str", default="", no_log=True),
            undrafted_how=dict(type="str", default="a second, undrafted server"),
            undrafted_missing=dict(type="str", default="no undrafted server to compare with"),
            dummy=dict(type="bool", default=False),
            vision=dict(type="bool", default=False),
            media_urls=dict(type="raw", default="data_only"),
            no_video=dict(type="str", default=""),
            exact_prompts=dict(type="int", default=8),
            exact_max_tokens=dict(type="int", default=64, no_log=False),
            long_prompts=dict(type="int", default=2),
            long_prompt_tokens=dict(type="int", default=8192, no_log=False),
            long_max_tokens=dict(type="int", default=32, no_log=False),
            saved_hashes=dict(type="dict", default={}),
            tool_calls=dict(type="int", default=40),
            tool_max_tokens=dict(type="int", default=256, no_log=False),
            json_instruction=dict(type="int", default=20),
            json_response_format=dict(type="int", default=20),
            json_max_tokens=dict(type="int", default=256, no_log=False),
            needle_sizes=dict(type="list", elements="float", default=[]),
            context=dict(type="int", default=8192),
            needle_depths=dict(type="list", elements="float", default=[0.1, 0.5, 0.9]),
            needle_max_tokens=dict(type="int", default=32, no_log=False),
            burst_size=dict(type="int", default=10),
            bursts=dict(type="int", default=3),
            timeout=dict(type="int", default=900),
            tls_ca_file=dict(type="path", default=""),
            tls_verify=dict(type="bool", default=True),
            progress_file=dict(type="path", default=""),
        ),
        supports_check_mode=False,
    )
    p = module.params
    tls = dict(ca_file=p["tls_ca_file"], verify=p["tls_verify"])
    unknown = sorted(set(p["checks"]) - set(verify.CHECKS))
    if unknown:
        fail(module, "E_CONFIG", "verify_checks", "verify_checks names unknown checks %s; the checks are %s" % (
            ", ".join(unknown), ", ".join(verify.CHECKS)))
    room = p["context"] - p["needle_max_tokens"] - 16
    p["needle_sizes"] = [int(s * room) if s <= 1 else int(s) for s in p["needle_sizes"]]
    client = Client(p["url"], p["api_key"], p["model"], p["timeout"], tls=tls)
    engine_key = p["engine_api_key"] or p["api_key"]
    if p["engine_url"]:  # the front serves no /metrics: the engine's counters are read at its own address
        client.metrics = Client(p["engine_url"], engine_key, p["model"], p["timeout"], tls=tls).metrics
    try:
        models = [m.get("id") for m in json.loads(client.get_text("/v1/models")).get("data", [])]
    except (EndpointError, ValueError) as e:
        message = "the engine does not answer for verify: %s" % e
        fail(module, "E_ENDPOINT", p["url"], message)
    undrafted = Client(p["undrafted_url"], engine_key, p["model"], p["timeout"], tls=tls) if p["undrafted_url"] else None
    start = time.time()
    checks, hashes = verify.Verifier(client, p, undrafted, StepFile(p["progress_file"], len(verify.CHECKS))).run(p["checks"], p["saved_hashes"])
    module.exit_json(changed=False, checks=checks, summary=verify.summary(checks), hashes=hashes,
                     engine_models=models, seconds=round(time.time() - start, 1))


if __name__ == "__main__":
    main()
