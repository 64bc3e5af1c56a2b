#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_warm
short_description: Warm a new engine at the concurrencies it serves before it is said LIVE
version_added: "0.1.0"
description:
  - A GPU engine compiles kernels on first use, per shape (vLLM's fused-MoE Triton kernels per batch size,
    torch.compile's shapes). This module pays that before users do - for each concurrency in O(concurrency), two
    rounds of that many concurrent streamed chat completions with distinct prompts and a short reply (the first
    round compiles, the second shows what a user then sees), then one long prompt twice (the chunked-prefill path).
  - Bounded by O(timeout) seconds - shapes not started by then are named in C(left_out) with a W_WARM_INCOMPLETE
    finding; the engine still serves. A request the engine refuses or does not answer fails with E_SMOKE and the
    engine log's last lines.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: none
    details: It sends requests to a running engine; the service stage runs it only after a new container started.
  diff_mode:
    support: none
options:
  url:
    description: The engine's base URL, as the host reaches it.
    type: str
    required: true
  api_key:
    description: The API key the engine requires (never shown).
    type: str
    default: ""
  model:
    description: The served model name.
    type: str
    required: true
  container:
    description: The engine's container, whose log ends a failure.
    type: str
    required: true
  docker_host:
    description: The daemon running the container.
    type: str
    default: unix:///var/run/docker.sock
  concurrency:
    description: The concurrencies to warm, in order (each twice); empty for none.
    type: list
    elements: int
    default: [1]
  reply_tokens:
    description: Tokens in each reply (the end of stream ignored).
    type: int
    default: 16
  long_prompt_tokens:
    description: About how many tokens the long prompt has; 0 for none.
    type: int
    default: 0
  timeout:
    description: Seconds the warm-up may take; no new shape starts after them, and a request may take no longer.
    type: int
    default: 600
  log_lines:
    description: How many of the engine log's last lines a failure shows.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Warm the engine before it is said LIVE
  gpuserve.llm.engine_warm:
    url: http://127.0.0.1:8020
    api_key: "{{ llm_api_key }}"
    model: tiny
    container: gpuserve-llm-a
    concurrency: [1, 2, 4]
    long_prompt_tokens: 512
    timeout: 120
"""

RETURN = r"""
levels:
  description: Per concurrency, the median and highest time to first token (ms) of the first and second round, and
    the seconds both took.
  returned: success
  type: list
  elements: dict
long_prompt:
  description: The long prompt's token count as the engine counted it, its first and second time to first token (ms).
  returned: success
  type: dict
left_out:
  description: The shapes the time budget left out.
  returned: success
  type: list
  elements: str
seconds:
  description: Seconds the warm-up took.
  returned: success
  type: float
line:
  description: One line for the play's summary.
  returned: success
  type: str
finding:
  description: W_WARM_INCOMPLETE when the budget left shapes out; on failure, the E_SMOKE finding.
  returned: when the budget left shapes out, and on failure
  type: dict
log_lines:
  description: On failure, the engine log's last lines.
  returned: failure
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils import docker_api, warm
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            api_key=dict(type="str", default="", no_log=True),
            model=dict(type="str", required=True),
            container=dict(type="str", required=True),
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
            concurrency=dict(type="list", elements="int", default=[1]),
            reply_tokens=dict(type="int", default=16, no_log=False),
            long_prompt_tokens=dict(type="int", default=0, no_log=False),
            timeout=dict(type="int", default=600),
            log_lines=dict(type="int", default=30),
        ),
        supports_check_mode=False,
    )
    p = module.params
    client = Client(p["url"], p["api_key"], p["model"], timeout=p["timeout"])
    try:
        result = warm.Warmer(client, p["reply_tokens"], p["timeout"]).run(p["concurrency"], p["long_prompt_tokens"])
    except warm.WarmError as e:
        docker_api.fail_with_log(module, "E_SMOKE", p["docker_host"], p["container"], p["log_lines"],
                                 "a warm-up request failed: %s" % e)
    if result["left_out"]:
        result["finding"] = finding(
            "W_WARM_INCOMPLETE", p["container"], "the warm-up ran out of its %d s before %s: the first users at those "
            "shapes pay for compilation" % (p["timeout"], ", ".join(result["left_out"])))
    module.exit_json(changed=False, line=warm.summary(result), **result)


if __name__ == "__main__":
    main()
