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
    whose container stops, is restarting or restarts fails at once, not at the timeout. A health answer counts only
    when it is proven to come from that container - it is running, not restarting, its restart count has not risen
    during the gate, and every socket listening on the URL's port (read from O(proc_root)/net/tcp and tcp6) is held
    by a process of the container (its cgroup names the container id, or it is the container's main process or a
    descendant of it; read from O(proc_root)/<pid>/fd, which needs root). Then one chat completion through the
    OpenAI API (the smoke request) and the KV pool figures from the engine's pool endpoint, and the same proof
    once more.
  - Fails with E_HEALTH (the container stopped or restarts, with its restart count; not healthy in O(timeout)
    seconds; the port's owner cannot be read without root), E_PORT_BUSY (another process holds the port, named by pid and
    command) or E_SMOKE (the request failed, or its reply has no content, tool call or reasoning), each with the
    engine log's last lines.
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
  fresh:
    description:
      - The container was just started - any restart it shows is a failure. Otherwise the restart count at the
        gate's first look is the baseline that must not rise (a container serving for days may have restarted once).
    type: bool
    default: false
  proc_root:
    description: The host's procfs, where the port's sockets and their processes are read (a fixture tree in tests).
    type: path
    default: /proc
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
served_by:
  description:
    - What answered - the container (name, short id, main pid, restart count) and the port with the processes
      holding its listening sockets (pid, command).
    - Where the container's processes cannot be seen in O(proc_root) (its Docker daemon runs in another PID
      namespace or on another machine), no holder is listed and C(finding) holds a W_CHECK_SKIPPED finding
      saying that the port's owner was not checked.
  returned: success
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
from ansible_collections.gpuserve.llm.plugins.module_utils import codes, docker_api, engines, port_owner
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client

try:
    from urllib.parse import urlsplit
except ImportError:  # Python 2 (ansible-test's import sanity only)
    from urlparse import urlsplit  # type: ignore


def fail_with_log(module, code, message):
    p = module.params
    docker_api.fail_with_log(module, code, p["docker_host"], p["container"], p["log_lines"], message)


def pool(engine, profile):
    status, text = engine.call(profile["pool"]["path"])
    return engines.pool_figures(profile["pool"]["parser"], text) if status == 200 else None


def endpoint(url):
    """(host, port) the gate reaches the engine at."""
    parts = urlsplit(url)
    return parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)


def held_by(proof):
    return ", ".join("pid %d (%s) on %s" % (o["pid"], o["command"], o["address"]) for o in proof["others"])


def port_hint(module, info, port):
    """A foreign process holding the engine's port, said beside a container that cannot start ("" if none)."""
    try:
        proof = port_owner.owner(module.params["proc_root"], port, endpoint(module.params["url"])[0],
                                 (info or {}).get("Id"), ((info or {}).get("State") or {}).get("Pid"))
    except (IOError, OSError, ValueError):
        return ""
    if proof["state"] != "other":
        return ""
    return ("; port %d is held by %s, a process outside the container, so the engine cannot bind it: stop that "
            "process or choose another llm_engine_port" % (port, held_by(proof)))


def container_problem(module, info, baseline, port, when):
    """Why the container is not the engine serving (stopped, restarting, restarted during the gate), or None."""
    name = module.params["container"]
    if info is None:
        return "the engine container %s is gone %s (no container of that name)" % (name, when)
    state = info.get("State") or {}
    count = info.get("RestartCount") or 0
    if state.get("Restarting") or count > baseline:
        return ("the engine container %s is crash-looping %s: %s (restart count %d%s, last exit code %s)%s" % (
            name, when, "restarting now" if state.get("Restarting") else "it exited and was restarted", count,
            ", %d when the gate began" % baseline if baseline and count > baseline else "", state.get("ExitCode", "?"),
            port_hint(module, info, port)))
    if not state.get("Running"):
        return "the engine container %s stopped %s (exit code %s%s%s)%s" % (
            name, when, state.get("ExitCode", "?"), ", out of memory" if state.get("OOMKilled") else "",
            ": %s" % state["Error"] if state.get("Error") else "", port_hint(module, info, port))
    return None


def prove(module, info, host, port):
    """Whether the container holds every socket listening on the engine's port: ("ours", proof) when it
    does; else (code, message) of the failure, code None while it may still come (nothing holds it yet)."""
    p = module.params
    state = info.get("State") or {}
    proof = port_owner.owner(p["proc_root"], port, host, info.get("Id"), state.get("Pid"))
    if proof["state"] == "ours":
        return "ours", proof
    if proof["state"] == "other":
        return "E_PORT_BUSY", (
            "port %d, the engine's (%s), is held by %s, not by the engine container %s (main pid %s): what answers "
            "there is not this engine. Stop that process (kill %s) or set llm_engine_port to a free port, then rerun "
            "the service stage" % (port, p["url"], held_by(proof), p["container"], state.get("Pid", "?"),
                                   " ".join(str(pid) for pid in sorted(set(o["pid"] for o in proof["others"])))))
    if proof["state"] == "unknown" and not proof["unreadable"] and not port_owner.sees(
            p["proc_root"], info.get("Id"), state.get("Pid"), info.get("Path")):
        # The daemon's processes are not in this PID namespace: the port cannot be proven, the container's
        # state (running, no restart) is all the gate has, and it says so.
        return "unproven", proof
    if proof["state"] == "unknown" and proof["unreadable"]:
        return "E_HEALTH", (
            "the socket listening on port %d (%s) is held by no process the gate can see: /proc/<pid>/fd of %d "
            "processes could not be read. The gate must prove the engine container %s holds the port: run it as "
            "root (ansible_become: true)" % (port, ", ".join(proof["listeners"]), proof["unreadable"], p["container"]))
    return None, ("%s answered, but %s" % (
        p["url"], "no socket listens on port %d in %s/net/tcp{,6}" % (port, p["proc_root"])
        if proof["state"] == "none" else "no process holds the socket listening on port %d (%s)" % (
            port, ", ".join(proof["listeners"]))))


def inspect(module):
    """The container's inspect document, None when there is none, or the error when the daemon did not answer."""
    try:
        return docker_api.inspect(module.params["docker_host"], module.params["container"]), None
    except (IOError, OSError, ValueError) as e:
        return None, "the Docker daemon: %s" % e


def served_by(module, info, port, proof):
    return {"container": module.params["container"], "id": (info.get("Id") or "")[:12],
            "pid": (info.get("State") or {}).get("Pid"), "restart_count": info.get("RestartCount") or 0,
            "port": port, "holders": [{"pid": o["pid"], "command": o["command"]} for o in proof["ours"]]}


def check_again(module, baseline, host, port):
    """After the smoke request: the same container still serving, unrestarted, holding the port."""
    info, error = inspect(module)
    if error:
        fail_with_log(module, "E_HEALTH", "the engine container %s could not be looked at after the smoke request "
                      "(%s)" % (module.params["container"], error))
    problem = container_problem(module, info, baseline, port, "after it answered the smoke request")
    if problem:
        fail_with_log(module, "E_HEALTH", problem)
    code, said = prove(module, info, host, port)
    if code not in ("ours", "unproven"):
        fail_with_log(module, code or "E_HEALTH", said + " (after the smoke request)")
    served = served_by(module, info, port, said)
    if code == "unproven":
        served["finding"] = codes.finding(
            "W_CHECK_SKIPPED", "port %d" % port,
            "who holds port %d (%s) was not checked: the engine container %s's processes are not visible in %s (its "
            "Docker daemon runs in another PID namespace or on another machine); the gate relied on the container "
            "running with no restart" % (port, ", ".join(said["listeners"]), module.params["container"],
                                         module.params["proc_root"]))
    return served


def smoke_reply(text):
    """{content, finish_reason} of a chat completion that said something (content, a tool call, or
    reasoning), else None."""
    try:
        choice = json.loads(text)["choices"][0]
        message = choice.get("message") or {}
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    if not isinstance(message, dict):
        return None
    for said in (message.get("content"), message.get("tool_calls"),
                 message.get("reasoning_content"), message.get("reasoning")):
        if said and (not isinstance(said, str) or said.strip()):
            return {"content": said if isinstance(said, str) else json.dumps(said),
                    "finish_reason": choice.get("finish_reason")}
    return None


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
            fresh=dict(type="bool", default=False),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    profile = engines.PROFILES[p["engine"]]
    url = p["url"].rstrip("/")
    host, port = endpoint(url)
    engine = Client(url, p["api_key"], timeout=10)
    start = time.time()
    # The restart count that must not rise while the gate watches: none at all for a container just started,
    # else the count at the first look the daemon answers.
    baseline = 0 if p["fresh"] else None
    first, error = inspect(module)
    if not error and first is not None and baseline is None:
        baseline = first.get("RestartCount") or 0
    last = "no answer yet"
    while True:
        status, text = engine.call(profile["health"]["path"], timeout=5)
        # Whatever answered, the container is looked at: an answer proves nothing until the port is its own.
        info, error = inspect(module)
        if error:
            last = "%s (%s)" % ("HTTP %s" % status if status else text, error)
        else:
            if baseline is None:
                baseline = (info or {}).get("RestartCount") or 0
            problem = container_problem(module, info, baseline, port, "before it was healthy")
            if problem:
                fail_with_log(module, "E_HEALTH", problem)
            if status == profile["health"]["status"]:
                code, said = prove(module, info, host, port)
                if code in ("ours", "unproven"):
                    break
                if code:
                    fail_with_log(module, code, said)
                last = said
            else:
                last = "HTTP %s: %s" % (status, text[:200]) if status else text
        if time.time() - start > p["timeout"]:
            fail_with_log(module, "E_HEALTH", "%s%s did not answer %d within %d s (last: %s)" % (
                url, profile["health"]["path"], profile["health"]["status"], p["timeout"], last))
        time.sleep(p["interval"])
    healthy_after = round(time.time() - start, 1)

    body = {"model": p["model"], "messages": [{"role": "user", "content": p["prompt"]}],
            "max_tokens": p["max_tokens"], "temperature": 0}
    status, text = engine.call("/v1/chat/completions", body, timeout=p["smoke_timeout"])
    reply = smoke_reply(text) if status == 200 else None
    if reply is None:
        fail_with_log(module, "E_SMOKE", "the smoke request (POST %s/v1/chat/completions, model %s) got %s: %s"
                      % (url, p["model"], ("HTTP 200 but no reply (no content, tool call or reasoning)"
                                           if status == 200 else "HTTP %s" % status if status else "no answer"),
                         (text or "")[:500] or "(an empty body)"))
    figures = pool(engine, profile)
    module.exit_json(changed=False, healthy_after_s=healthy_after, reply=reply, pool=figures,
                     served_by=check_again(module, baseline, host, port))


if __name__ == "__main__":
    main()
