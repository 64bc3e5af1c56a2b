#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_drain
short_description: Wait until an engine runs no request (after it was taken out of the router)
version_added: "0.1.0"
description:
  - Polls the engine's own count of running requests - llama.cpp C(/slots) (a slot C(is_processing)), vLLM
    C(vllm:num_requests_running), SGLang C(sglang:num_running_reqs) on C(/metrics) - until it is 0 or O(timeout)
    passes. Streams the router already sent to the engine end there; the router sends it no new ones.
  - Changes nothing; at the timeout it returns C(drained=false) with the count still running.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the count once and does not wait.
  diff_mode:
    support: none
options:
  url:
    description: The engine's URL as the host reaches it.
    type: str
    required: true
  engine:
    description: The engine profile.
    type: str
    choices: [vllm, sglang, llamacpp]
    required: true
  api_key:
    description: The engine's API key (its /slots and /metrics need it).
    type: str
    default: ""
  timeout:
    description: The longest wait, in seconds.
    type: int
    default: 300
  interval:
    description: Seconds between polls.
    type: float
    default: 0.5
"""

EXAMPLES = r"""
- name: Wait for the engine's running requests to end
  gpuserve.llm.engine_drain:
    url: http://127.0.0.1:8020
    engine: llamacpp
    api_key: "{{ llm_api_key }}"
    timeout: 300
"""

RETURN = r"""
drained:
  description: Whether the engine ran no request at the end.
  returned: always
  type: bool
running:
  description: Requests running at the first and at the last poll.
  returned: always
  type: dict
waited_s:
  description: Seconds waited.
  returned: always
  type: float
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import engines
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            engine=dict(type="str", choices=sorted(engines.PROFILES), required=True),
            api_key=dict(type="str", default="", no_log=True),
            timeout=dict(type="int", default=300),
            interval=dict(type="float", default=0.5),
        ),
        supports_check_mode=True,
    )
    engine, client = module.params["engine"], Client(module.params["url"], module.params["api_key"])
    path = engines.PROFILES[engine]["running"]["path"]
    started = time.monotonic()
    first = last = None
    while True:
        status, text = client.call(path, timeout=10)
        if status is None:  # nothing answers: no request can be running
            last = 0
        elif status == 200:
            last = engines.running_requests(engine, text)
        else:
            module.fail_json(msg="E_ENDPOINT: %s%s answered HTTP %s while draining (check llm_api_key)" % (
                module.params["url"], path, status), drained=False)
        first = last if first is None else first
        waited = time.monotonic() - started
        if last == 0 or module.check_mode or waited >= module.params["timeout"]:
            break
        time.sleep(module.params["interval"])
    module.exit_json(changed=False, drained=last == 0, running={"first": first, "last": last},
                     waited_s=round(time.monotonic() - started, 2))


if __name__ == "__main__":
    main()
