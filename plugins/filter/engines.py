# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: engine_command
short_description: Render an engine profile's command line from the llm_ settings
version_added: "0.1.0"
description:
  - Renders templates/<engine>.j2 for the engine named by C(llm_engine) and returns C(argv) (the container's
    command), C(env) (its environment; the API key goes here, never on argv) and C(display) (the command as a
    person would type it, with secrets shown as <variable name>).
  - The same file provides C(engine_profile) (image, health endpoint and pool source of an engine) and
    C(undrafted_argv) (an engine's argv without its drafter flags, on another port) and C(engine_url) (how a
    process on the host reaches an engine bound to a port and address).
options:
  _input:
    description: The typed settings by name, as validation returned them (C(llm_settings)); raw variables are not
      converted here.
    type: dict
    required: true
  paths:
    description: Container paths and knobs the template uses (model_dir, draft_dir, model_file, draft_file, dummy,
      threads, batch_size).
    type: dict
    default: {}
  facts:
    description: Host facts (gpu_memory_total_mib, for the memory fraction that keeps llm_reserve_gib free).
    type: dict
    default: {}
author:
  - gpuserve.llm contributors (@gpuserve)
"""

EXAMPLES = r"""
- name: The engine's command
  ansible.builtin.set_fact:
    service_command: "{{ settings | gpuserve.llm.engine_command({'model_dir': '/models/m'}, {'gpu_memory_total_mib': 97887}) }}"
"""

RETURN = r"""
_value:
  description: argv (list), env (dict) and display (str).
  type: dict
"""

import hashlib
import os

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.llm.plugins.module_utils import engines

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def engine_profile(engine):
    if engine not in engines.PROFILES:
        raise AnsibleFilterError("no engine profile %r; known: %s" % (engine, ", ".join(sorted(engines.PROFILES))))
    return dict(engines.PROFILES[engine])


def engine_command(settings, paths=None, facts=None):
    """`settings`: the typed settings validation returned (llm_settings), not the raw variables."""
    profile = engine_profile(settings.get("llm_engine"))
    paths = dict({"dummy": False}, **(paths or {}))
    with open(os.path.join(COLLECTION, "templates", profile["template"])) as f:
        template = f.read()
    context = engines.command_context(settings, paths, facts)
    try:
        return engines.render(template, context, {"llm_api_key": settings.get("llm_api_key", "")})
    except Exception as e:
        raise AnsibleFilterError("rendering the %s command failed: %s" % (settings.get("llm_engine"), e))


def undrafted_argv(argv, engine, port=None):
    if engine not in engines.DRAFTER_FLAGS:
        raise AnsibleFilterError("no engine profile %r; known: %s" % (engine, ", ".join(sorted(engines.PROFILES))))
    return engines.undrafted_argv(list(argv), engine, None if port is None else int(port))


def engine_url(port, host="0.0.0.0"):
    """How a process on the host reaches the engine (a wildcard bind answers on loopback)."""
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else ("[%s]" % host if ":" in host else host)
    return "http://%s:%s" % (host, port)


def patch_series(directory):
    """The patch series in a folder, in order: a `series` file names it, else the *.patch names sorted.

    Returns {"patches": [{"name", "path", "sha256"}], "sha256": hash of the names and contents in order}.
    """
    if not directory or not os.path.isdir(directory):
        return {"patches": [], "sha256": hashlib.sha256(b"").hexdigest()}
    series = os.path.join(directory, "series")
    if os.path.exists(series):
        with open(series) as f:
            names = [line.split("#")[0].strip() for line in f if line.split("#")[0].strip()]
    else:
        names = sorted(n for n in os.listdir(directory) if n.endswith((".patch", ".diff")))
    total = hashlib.sha256()
    patches = []
    for name in names:
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            raise AnsibleFilterError("E_PATCH: %s names %s, which is not in %s" % (series, name, directory))
        with open(path, "rb") as f:
            data = f.read()
        total.update(name.encode() + b"\0" + data + b"\0")
        patches.append({"name": name, "path": path, "sha256": hashlib.sha256(data).hexdigest()})
    return {"patches": patches, "sha256": total.hexdigest()}


class FilterModule(object):
    def filters(self):
        return {"engine_command": engine_command, "engine_profile": engine_profile, "patch_series": patch_series,
                "undrafted_argv": undrafted_argv, "engine_url": engine_url}
