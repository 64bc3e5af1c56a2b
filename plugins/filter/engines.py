# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each filter is documented in <its name>.yml beside this file (ansible-doc -t filter gpuserve.llm.<name>).

import hashlib
import os
import re

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


def router_command(settings, workers=()):
    """vllm-router's argv from the router_ settings (templates/vllm-router.j2) and the worker URLs."""
    with open(os.path.join(COLLECTION, "templates", "vllm-router.j2")) as f:
        template = f.read()
    try:
        return engines.render(template, dict(settings, workers=list(workers)), {})["argv"]
    except Exception as e:
        raise AnsibleFilterError("rendering the router's command failed: %s" % e)


def undrafted_argv(argv, engine, port=None):
    if engine not in engines.DRAFTER_FLAGS:
        raise AnsibleFilterError("no engine profile %r; known: %s" % (engine, ", ".join(sorted(engines.PROFILES))))
    return engines.undrafted_argv(list(argv), engine, None if port is None else int(port))


def _scheme(tls):
    if not isinstance(tls, bool):
        raise AnsibleFilterError("tls is %r: true (https, a front with llm_tls) or false (http)" % (tls,))
    return "https" if tls else "http"


def engine_url(port, host="0.0.0.0", tls=False):
    """How a process on the host reaches the engine or a front (a wildcard bind answers on loopback)."""
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else ("[%s]" % host if ":" in host else host)
    return "%s://%s:%s" % (_scheme(tls), host, port)


def fleet_url(port, host="0.0.0.0", address="", tls=False):
    """How another host (a router, a client) reaches an engine or a front: a wildcard bind at the host's address."""
    if host in ("0.0.0.0", "::", ""):
        host = address or "127.0.0.1"
    return "%s://%s:%s" % (_scheme(tls), "[%s]" % host if ":" in host else host, port)


def patch_series(directory):
    """The patch series in a folder, in order: a `series` file names it, else the *.patch names sorted.

    Returns {"patches": [{"name", "path", "sha256"}], "sha256": hash of the names and contents in order,
    "version": the engine version the series file declares ('# version: X'), else ''}.
    """
    if not directory or not os.path.isdir(directory):
        return {"patches": [], "sha256": hashlib.sha256(b"").hexdigest(), "version": ""}
    series = os.path.join(directory, "series")
    version = ""
    if os.path.exists(series):
        with open(series) as f:
            lines = f.read().splitlines()
        names = [line.split("#")[0].strip() for line in lines if line.split("#")[0].strip()]
        # The engine version the series is written for: a comment line `# version: 0.26.0` (a pulled image's
        # installed package is checked against it before the series is applied).
        for line in lines:
            m = re.match(r"^#\s*version:\s*(\S+)\s*$", line.strip())
            if m:
                version = m.group(1)
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
    return {"patches": patches, "sha256": total.hexdigest(), "version": version}


def serving_engine(container, engine=""):
    """The engine a container of the service runs (its gpuserve.llm.engine label), else `engine`."""
    labels = ((container or {}).get("Config") or {}).get("Labels") or {}
    return labels.get("gpuserve.llm.engine") or engine


def serving_api_key(container, engine=""):
    """The API key the container was started with, from its environment ('' for none): a run that changes
    llm_api_key or llm_engine asks the old engine what it checks, not what the run would give a new one."""
    engine = serving_engine(container, engine)
    if engine not in engines.PROFILES:
        return ""
    prefix = engines.PROFILES[engine]["api_key_env"] + "="
    for line in ((container or {}).get("Config") or {}).get("Env") or []:
        if line.startswith(prefix):
            return line[len(prefix):]
    return ""


class FilterModule(object):
    def filters(self):
        return {"engine_command": engine_command, "engine_profile": engine_profile, "patch_series": patch_series,
                "undrafted_argv": undrafted_argv, "engine_url": engine_url, "router_command": router_command,
                "fleet_url": fleet_url, "serving_engine": serving_engine, "serving_api_key": serving_api_key}
