#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_ready
short_description: Wait for the engine to be healthy, send a smoke request, read its KV pool
version_added: "0.1.0"
description:
  - Polls the engine's health endpoint until it answers the expected status, watching the container - an engine
    whose container stops fails at once, not at the timeout. Then one chat completion through the OpenAI API (the
    smoke request) and the KV pool figures from the engine's pool endpoint.
  - Fails with E_HEALTH (the container stopped, or not healthy in O(timeout) seconds) or E_SMOKE (the request
    failed), each with the engine log's last lines.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Only reads and sends the smoke request; changes nothing.
  diff_mode:
    support: none
options:
  url:
    description: The engine's base URL, as the host reaches it.
    type: str
    required: true
  engine:
    description: The engine profile (health and pool endpoints).
    type: str
    choices: [vllm, sglang, llamacpp]
    required: true
  container:
    description: The engine's container, watched while waiting and whose log ends a failure.
    type: str
    required: true
  docker_host:
    description: The daemon running the container.
    type: str
    default: unix:///var/run/docker.sock
  timeout:
    description: Seconds to wait for healthy.
    type: int
    default: 900
  interval:
    description: Seconds between health polls.
    type: float
    default: 2
  api_key:
    description: The API key the engine requires (never shown).
    type: str
    default: ""
  model:
    description: The served model name for the smoke request.
    type: str
    required: true
  prompt:
    description: The smoke request's user message.
    type: str
    default: Say hello.
  max_tokens:
    description: The smoke reply's budget.
    type: int
    default: 16
  smoke_timeout:
    description: Seconds for the smoke request.
    type: int
    default: 300
  log_lines:
    description: How many of the engine log's last lines a failure shows.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Healthy, answering, and its pool
  gpuserve.llm.engine_ready:
    url: http://127.0.0.1:8020
    engine: llamacpp
    container: gpuserve-llm-a
    model: tiny
    api_key: "{{ llm_api_key }}"
    timeout: 120
"""

RETURN = r"""
healthy_after_s:
  description: Seconds until the health endpoint answered.
  returned: success
  type: float
reply:
  description: The smoke request's reply (content, or the tool call / reasoning it gave) and finish reason.
  returned: success
  type: dict
pool:
  description: KV pool figures, pool_tokens and free_tokens (null when the engine does not say).
  returned: success
  type: dict
finding:
  description: On failure, the E_HEALTH or E_SMOKE finding.
  returned: failure
  type: dict
log_lines:
  description: On failure, the engine log's last lines.
  returned: failure
  type: list
  elements: str
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils import docker_api, engines
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client


def fail_with_log(module, code, message):
    p = module.params
    docker_api.fail_with_log(module, code, p["docker_host"], p["container"], p["log_lines"], message)


def pool(engine, profile):
    status, text = engine.call(profile["pool"]["path"])
    return engines.pool_figures(profile["pool"]["parser"], text) if status == 200 else None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            engine=dict(type="str", required=True, choices=sorted(engines.PROFILES)),
            container=dict(type="str", required=True),
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
            timeout=dict(type="int", default=900),
            interval=dict(type="float", default=2),
            api_key=dict(type="str", default="", no_log=True),
            model=dict(type="str", required=True),
            prompt=dict(type="str", default="Say hello."),
            max_tokens=dict(type="int", default=16, no_log=False),
            smoke_timeout=dict(type="int", default=300),
            log_lines=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    profile = engines.PROFILES[p["engine"]]
    url = p["url"].rstrip("/")
    engine = Client(url, p["api_key"], timeout=10)
    start = time.time()
    last = "no answer yet"
    while True:
        status, text = engine.call(profile["health"]["path"], timeout=5)
        if status == profile["health"]["status"]:
            break
        last = "HTTP %s: %s" % (status, text[:200]) if status else text
        try:
            info = docker_api.inspect(p["docker_host"], p["container"])
        except (IOError, OSError, ValueError) as e:
            info = {"State": {"Running": True}}  # the daemon did not answer: keep waiting on the engine
            last = "%s (the Docker daemon: %s)" % (last, e)
        if info is not None and (info.get("RestartCount") or info.get("State", {}).get("Restarting")):
            fail_with_log(module, "E_HEALTH", "the engine container %s exited and was restarted (%d restarts) before "
                          "it was healthy (last exit code %s)" % (p["container"], info.get("RestartCount") or 0,
                                                                  info.get("State", {}).get("ExitCode", "?")))
        if info is None or not info.get("State", {}).get("Running"):
            state = (info or {}).get("State", {})
            fail_with_log(module, "E_HEALTH", "the engine container %s stopped before it was healthy (exit code %s%s%s)"
                          % (p["container"], state.get("ExitCode", "?"),
                             ", out of memory" if state.get("OOMKilled") else "",
                             ": %s" % state["Error"] if state.get("Error") else ""))
        if time.time() - start > p["timeout"]:
            fail_with_log(module, "E_HEALTH", "%s%s did not answer %d within %d s (last: %s)" % (
                url, profile["health"]["path"], profile["health"]["status"], p["timeout"], last))
        time.sleep(p["interval"])
    healthy_after = round(time.time() - start, 1)

    body = {"model": p["model"], "messages": [{"role": "user", "content": p["prompt"]}],
            "max_tokens": p["max_tokens"], "temperature": 0}
    status, text = engine.call("/v1/chat/completions", body, timeout=p["smoke_timeout"])
    reply = None
    if status == 200:
        try:
            choice = json.loads(text)["choices"][0]
            message = choice.get("message") or {}
            said = message.get("content") or message.get("reasoning_content") or message.get("tool_calls")
            reply = {"content": said if isinstance(said, str) else json.dumps(said),
                     "finish_reason": choice.get("finish_reason")}
        except (ValueError, KeyError, IndexError, TypeError):
            reply = None
    if reply is None:
        fail_with_log(module, "E_SMOKE", "the smoke request (POST %s/v1/chat/completions, model %s) got %s: %s"
                      % (url, p["model"], "HTTP %s" % status if status else "no answer", (text or "")[:500]))
    module.exit_json(changed=False, healthy_after_s=healthy_after, reply=reply, pool=pool(engine, profile))


if __name__ == "__main__":
    main()
