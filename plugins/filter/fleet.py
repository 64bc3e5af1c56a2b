# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each filter is documented in <its name>.yml beside this file (ansible-doc -t filter gpuserve.llm.<name>).

# Cross-host lookups of a fleet whose hosts differ: a host that never set the variable (another weights
# source or engine, a stage it skipped, a host that failed earlier) is left out, never an error; each host's
# variables are read once, so a play builds the result once (run_once) and every host reads its own entry.

import functools
import json
import os
import re

from collections.abc import Mapping

import yaml

from jinja2 import Undefined

from ansible.errors import AnsibleUndefinedVariable
from ansible.module_utils.parsing.convert_bool import boolean

from ansible_collections.gpuserve.llm.plugins.module_utils import engines

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_MISSING = object()


def _value(variables, path):
    """The value at the dotted path in a host's variables, or _MISSING where any step is not there."""
    value = variables
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return _MISSING
        try:
            value = value[part]
        except (KeyError, AnsibleUndefinedVariable):
            return _MISSING
        if isinstance(value, Undefined):
            return _MISSING
    return value


def _host_vars(hostvars, host):
    if host not in hostvars:
        return None
    found = hostvars[host]
    return None if isinstance(found, Undefined) else found


def values_by_host(hostvars, hosts, attribute):
    """{host: its value of the variable at the dotted path `attribute`} for each of `hosts` (in their order,
    once each) that has it; hosts without it, or not in the inventory, are left out."""
    out = {}
    for host in hosts or []:
        if host in out:
            continue
        variables = _host_vars(hostvars, host)
        if variables is None:
            continue
        value = _value(variables, attribute)
        if value is not _MISSING:
            out[host] = value
    return out


def _key(value):
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def peers_by_key(hostvars, hosts, attribute, only=None):
    """{key: [the hosts with that key, in the order of `hosts`]}: `hosts` grouped by their value of the variable
    at the dotted path `attribute` (a value that is not a string keyed by its JSON text). A host without the
    variable is in no group; with `only`, a host whose value at that dotted path is missing or false too."""
    groups = {}
    seen = set()
    for host in hosts or []:
        if host in seen:
            continue
        seen.add(host)
        variables = _host_vars(hostvars, host)
        if variables is None:
            continue
        value = _value(variables, attribute)
        if value is _MISSING:
            continue
        if only:
            flag = _value(variables, only)
            if flag is _MISSING or not flag:
                continue
        groups.setdefault(_key(value), []).append(host)
    return groups


def _previous_groups(previous):
    """The groups of the targets file as it was, by (job, host); [] for no file, another format or text that
    is not JSON (the file is rewritten whole either way)."""
    try:
        groups = json.loads(previous or "[]")
    except ValueError:
        return {}
    found = {}
    for group in groups if isinstance(groups, list) else []:
        labels = group.get("labels") if isinstance(group, Mapping) else None
        if isinstance(labels, Mapping) and labels.get("gpuserve_host") and isinstance(group.get("targets"), list):
            found[(labels.get("job"), labels["gpuserve_host"])] = group
    return found


def prometheus_targets(hostvars, engines, routers, previous=""):
    """The file_sd groups of reports/prometheus-targets.json, one a host and job, labelled with the host's name.
    A host that noted its address in this run (llm_fleet_url, router_metrics_target) has it; one that did not
    (left out by --limit, failed before it) keeps its group of the file as it was; a host no longer in the
    inventory's group is dropped."""
    before = _previous_groups(previous)
    out = []
    for job, hosts, attribute in (("gpuserve-engines", engines, "llm_fleet_url"),
                                  ("gpuserve-router", routers, "router_metrics_target")):
        for host in dict.fromkeys(hosts or []):
            variables = _host_vars(hostvars, host)
            address = _MISSING if variables is None else _value(variables, attribute)
            if address is _MISSING:
                if (job, host) in before:
                    out.append(before[(job, host)])
                continue
            labels = {"job": job, "gpuserve_host": host}
            if job == "gpuserve-engines":
                address = re.sub(r"^https?://", "", address)
                labels["gpuserve_api_key"] = "required" if _value(variables, "llm_api_key") not in (_MISSING, "", None) else "none"
            out.append({"targets": [address], "labels": labels})
    return out


@functools.lru_cache(maxsize=1)
def _llm_defaults():
    """The llm role's defaults as written, read once: what a host whose inventory does not set llm_engine or
    llm_vision has (role defaults are the same for every host, and hostvars does not hold them)."""
    with open(os.path.join(COLLECTION, "roles", "llm", "defaults", "main.yml")) as f:
        return yaml.safe_load(f)


def fleet_media(hostvars, hosts):
    """{'image': n, 'video': n}: the fewest of each kind that any of `hosts` takes in one request - its engine's
    media_per_request with llm_vision, else none - read from each host's variables (the inventory's, extra
    variables) or the llm role's defaults. The router may send a request to any of them, and SGLang and llama.cpp
    count no media themselves: a host's own front does, and the router goes round it."""
    defaults = _llm_defaults()
    least = None
    for host in hosts or []:
        variables = _host_vars(hostvars, host)
        if variables is None:
            continue
        engine = _value(variables, "llm_engine")
        engine = defaults.get("llm_engine") if engine is _MISSING else engine
        vision = _value(variables, "llm_vision")
        vision = defaults.get("llm_vision") if vision is _MISSING else vision
        if engine not in engines.PROFILES:
            continue  # refused at its validation
        takes = engines.PROFILES[engine]["media_per_request"] if boolean(vision, strict=False) else {}
        takes = dict((kind, int(takes.get(kind, 0))) for kind in ("image", "video"))
        least = takes if least is None else dict((k, min(least[k], takes[k])) for k in least)
    return least or {"image": 0, "video": 0}


class FilterModule(object):
    def filters(self):
        return {"fleet_media": fleet_media, "peers_by_key": peers_by_key, "prometheus_targets": prometheus_targets,
                "values_by_host": values_by_host}
