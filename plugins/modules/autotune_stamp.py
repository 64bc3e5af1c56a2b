#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: autotune_stamp
short_description: Mark a kernel tune's result ready, only when the tuner's outputs validate
version_added: "0.1.0"
description:
  - Validates the tuner's output in the folder of a plan from M(gpuserve.llm.autotune_plan) (llama.cpp - every grid
    point measured; vLLM and SGLang - the shape's file with every expected batch size and a complete Triton config
    for each; for vLLM and a block-FP8 checkpoint also C(gemv.json), every planned linear shape with a config of the
    one-token GEMV or none) and only then writes the stamp, with the choice for llama.cpp (fastest threads, prompt
    threads, batch and ubatch). Anything missing fails with E_AUTOTUNE, the problems and the end of the tuner container's log; no
    stamp is written.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Validates and says whether it would stamp; writes nothing.
  diff_mode:
    support: none
options:
  plan:
    description: The plan (M(gpuserve.llm.autotune_plan)'s result) whose output this validates.
    type: dict
    required: true
  tuned_on:
    description: The host whose tuner made the files (this one, or the one they were copied from).
    type: str
    default: ""
  container:
    description: The tuner container, whose exit code counts and whose log end a failure shows.
    type: str
    default: ""
  docker_host:
    description: The Docker daemon of O(container).
    type: str
    default: unix:///var/run/docker.sock
"""

EXAMPLES = r"""
- name: Plan the tune
  gpuserve.llm.autotune_plan:
    engine: llamacpp
    base_dir: /var/lib/gpuserve/cache/autotune
    model_file: /var/lib/gpuserve/models/dummy/m/model.gguf
  register: plan

- name: Stamp when the tuner's output validates
  gpuserve.llm.autotune_stamp:
    plan: "{{ plan }}"
    tuned_on: "{{ inventory_hostname }}"
    container: gpuserve-llm-autotune
"""

RETURN = r"""
key:
  description: The cache key (the plan's).
  returned: always
  type: str
dir:
  description: The result folder on the host.
  returned: always
  type: str
ready:
  description: True - the output validated and is stamped (in check mode, would be).
  returned: always
  type: bool
inputs:
  description: Everything hashed into the key.
  returned: always
  type: dict
choice:
  description: For llama.cpp, the chosen threads, threads_batch, batch_size, ubatch_size and their tokens per second.
  returned: always
  type: dict
stamp:
  description: The stamp (key, inputs, when, tuned on, files with their sha256, choice).
  returned: always
  type: dict
"""

import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import autotune, docker_api
from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import write_json
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.dummy_gguf import digest as sha256


def tuner_log_end(p, lines=15):
    """The tuner container's exit and last log lines, for the failure's message."""
    if not p["container"]:
        return ""
    try:
        info, tail = docker_api.log_tail(p["docker_host"], p["container"], lines, blank_lines=False)
        if info is None:
            return " (the tuner container %s is gone)" % p["container"]
        state = info.get("State", {})
        return " (the tuner container %s exited %s%s); its log ends:\n%s" % (
            p["container"], state.get("ExitCode"), ", killed" if state.get("OOMKilled") or state.get("ExitCode") == 137
            else "", "\n".join(tail) or "(empty)")
    except (IOError, OSError, ValueError) as e:
        return " (the tuner's log could not be read: %s)" % e


def exit_problem(p):
    """The tuner container's exit, when it was not a clean one."""
    if not p["container"]:
        return []
    info = docker_api.inspect(p["docker_host"], p["container"])
    if info is None:
        return ["the tuner container %s is gone" % p["container"]]
    state = info.get("State", {})
    if state.get("Running"):
        return ["the tuner container %s is still running" % p["container"]]
    return ["the tuner exited %s" % state.get("ExitCode")] if state.get("ExitCode") else []


def stamp(module, p):
    the_plan = p["plan"]
    engine, folder = the_plan["engine"], the_plan["dir"]
    files, choice = {}, {}
    try:
        problems = exit_problem(p)
    except (IOError, OSError, ValueError) as e:
        problems = ["the tuner container could not be inspected: %s" % e]
    if engine == "llamacpp":
        grid = the_plan["grid"]
        records = {}
        for name in ("tg.json", "pp.json"):
            try:
                with open(os.path.join(folder, name)) as f:
                    records[name] = json.load(f)
                files[name] = sha256(os.path.join(folder, name))
            except (IOError, OSError, ValueError) as e:
                problems.append("%s is missing or unreadable (%s)" % (name, e))
        if not problems:
            choice, problems = autotune.choose_llamacpp(records["tg.json"], records["pp.json"], grid,
                                                        the_plan["inputs"]["n_prompt"], the_plan["inputs"]["n_gen"])
    else:
        if the_plan.get("moe"):
            moe = the_plan["moe"]
            found, path = autotune.validate_moe(folder, moe["file"], moe["batch_sizes"])
            problems += found
            if path:
                files[os.path.relpath(path, folder)] = sha256(path)
        if the_plan.get("gemv"):
            found = autotune.validate_gemv(folder, the_plan["gemv"]["shapes"])
            problems += found
            if not found:
                files[autotune.GEMV_FILE] = sha256(os.path.join(folder, autotune.GEMV_FILE))
    if problems:
        fail(module, "E_AUTOTUNE", folder, "the %s tune is incomplete, nothing is marked ready: %s%s"
             % (engine, "; ".join(problems), tuner_log_end(p)), details=dict(problems=problems))
    new = {"key": the_plan["key"], "inputs": the_plan["inputs"], "files": files, "choice": choice,
           "tuned_on": p["tuned_on"], "completed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    old = autotune.read_stamp(folder) or {}
    changed = any(old.get(k) != new[k] for k in ("key", "files", "choice", "tuned_on"))
    if changed and not module.check_mode:
        write_json(os.path.join(folder, autotune.STAMP), new, indent=1)
    return dict(the_plan, ready=True, stamp=new, choice=choice, changed=changed)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            plan=dict(type="dict", required=True),
            tuned_on=dict(type="str", default=""),
            container=dict(type="str", default=""),
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(**stamp(module, module.params))


if __name__ == "__main__":
    main()
