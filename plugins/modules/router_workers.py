#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: router_workers
short_description: The workers of a vllm-router, through its admin endpoints on the router host
version_added: "0.1.0"
description:
  - Reads C(GET /list_workers), then adds (C(POST /add_worker?url=)) the O(present) workers it lacks and removes
    (C(POST /remove_worker?url=)) the O(absent) ones it has, and with O(exact) every worker not in O(present).
    C(/add_worker) answers once the worker is healthy (the router's startup timeout).
  - Runs on the router host, where the admin endpoints listen on 127.0.0.1 (they have no authentication).
  - Then reads C(GET /readiness) (healthy and total workers); O(wait_healthy) waits until every worker is healthy.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the list and says what it would add or remove; sends no change.
  diff_mode:
    support: full
options:
  url:
    description: The router's own listener, as the router host reaches it (C(http://127.0.0.1:PORT)).
    type: str
    required: true
  present:
    description: Engine URLs (C(http://host:port)) the router must have.
    type: list
    elements: str
    default: []
  absent:
    description: Engine URLs the router must not have.
    type: list
    elements: str
    default: []
  exact:
    description: Remove every worker not in O(present) too.
    type: bool
    default: false
  missing_ok:
    description: When nothing answers at O(url) (no router yet), report that and change nothing instead of failing.
    type: bool
    default: false
  wait_healthy:
    description: Seconds to wait for every worker to be healthy (C(/readiness)); 0 for no wait.
    type: int
    default: 0
  timeout:
    description: Seconds for each request (an add waits for the worker's health inside the router).
    type: int
    default: 180
  evicted_file:
    description:
      - The router host's note of the workers keepalived's check took out of the router when the host took
        C(router_vip) because they did not answer (C(evicted.json) in C(router_vrrp_state_dir)); the check puts them
        back when they answer again.
      - The workers this task names (O(present), O(absent); with O(exact), every one) are dropped from the note, so
        the check never puts back a worker the plays took out. Written by root; a missing file is an empty note.
    type: path
"""

EXAMPLES = r"""
- name: The LIVE hosts are the router's workers
  gpuserve.llm.router_workers:
    url: http://127.0.0.1:8001
    present: [http://10.0.0.5:8020, http://10.0.0.6:8020]
    exact: true
    wait_healthy: 60

- name: Take this host out before its engine stops
  gpuserve.llm.router_workers:
    url: http://127.0.0.1:8001
    absent: [http://10.0.0.6:8020]
    missing_ok: true
"""

RETURN = r"""
workers:
  description: The router's workers after the change (sorted).
  returned: always
  type: list
  elements: str
added:
  description: Workers added (or that would be, in check mode).
  returned: always
  type: list
  elements: str
removed:
  description: Workers removed (or that would be).
  returned: always
  type: list
  elements: str
evicted_forgotten:
  description: Workers dropped from O(evicted_file) (none in check mode).
  returned: when a router answered
  type: list
  elements: str
answered:
  description: Whether a router answered at O(url).
  returned: always
  type: bool
healthy_workers:
  description: Healthy workers by the router's /readiness.
  returned: when a router answered
  type: int
total_workers:
  description: Workers by the router's /readiness.
  returned: when a router answered
  type: int
"""

import fcntl
import json
import os
import time

from urllib.parse import quote

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils.openai_client import Client


class RouterError(Exception):
    pass


def request(url, method, path, timeout):
    """(status, text) of one request to the router (its admin endpoints take no body and no key);
    RouterError when nothing answers."""
    status, text = Client(url).call(path, timeout=timeout, method=method)
    if status is None:
        raise RouterError("%s%s did not answer: %s" % (url, path, text))
    return status, text


def listed(url, timeout):
    status, text = request(url, "GET", "/list_workers", timeout)
    if status != 200:
        raise RouterError("%s/list_workers answered HTTP %s: %s" % (url, status, text[:300]))
    return sorted(json.loads(text).get("urls") or [])


def readiness(url, timeout):
    _status, text = request(url, "GET", "/readiness", timeout)
    try:
        body = json.loads(text)
    except ValueError:
        body = {}
    return int(body.get("healthy_workers", 0)), int(body.get("total_workers", 0))


def forget_evicted(path, urls, every):
    """Drops urls (every one with every) from keepalived's check's note of evicted workers, under its lock;
    the list dropped."""
    if not path or not os.path.exists(path):
        return []
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with open(path) as f:
            try:
                noted = json.load(f)
            except ValueError:
                noted = []
        dropped = [u for u in noted if every or u in urls]
        if dropped:
            with open(path + ".new", "w") as f:
                json.dump([u for u in noted if u not in dropped], f)
            os.replace(path + ".new", path)
    return dropped


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            present=dict(type="list", elements="str", default=[]),
            absent=dict(type="list", elements="str", default=[]),
            exact=dict(type="bool", default=False),
            missing_ok=dict(type="bool", default=False),
            wait_healthy=dict(type="int", default=0),
            timeout=dict(type="int", default=180),
            evicted_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    url, timeout = module.params["url"].rstrip("/"), module.params["timeout"]
    wanted = sorted(set(w.rstrip("/") for w in module.params["present"]))
    unwanted = sorted(set(w.rstrip("/") for w in module.params["absent"]) - set(wanted))
    # Dropped from keepalived's check's note first: a check that reads the note after this does not put one
    # of them back, and one that put a worker back before it is undone by the removal below.
    forgotten = []
    if not module.check_mode:
        try:
            forgotten = forget_evicted(module.params["evicted_file"], set(wanted) | set(unwanted),
                                       module.params["exact"])
        except OSError as e:  # root's file: a run that does not become root cannot drop them
            module.warn("could not drop the workers named here from %s (%s): keepalived's check may put one of "
                        "them back into the router; run as root (ansible_become)" % (module.params["evicted_file"], e))
    try:
        before = listed(url, 30)
    except RouterError as e:
        if module.params["missing_ok"]:
            module.exit_json(changed=False, answered=False, workers=[], added=[], removed=[], msg=str(e))
        module.fail_json(msg="E_ROUTER: %s" % e, answered=False)
    add = [w for w in wanted if w not in before]
    if module.params["exact"]:
        remove = [w for w in before if w not in wanted]
    else:
        remove = [w for w in before if w in unwanted]
    result = dict(changed=bool(add or remove), answered=True, added=add, removed=remove, evicted_forgotten=forgotten,
                  diff=dict(before="\n".join(before) + "\n",
                            after="\n".join(sorted(set(before) - set(remove) | set(add))) + "\n"))
    if module.check_mode:
        healthy, total = readiness(url, 30)
        module.exit_json(workers=before, healthy_workers=healthy, total_workers=total, **result)
    try:
        for worker in remove:
            status, text = request(url, "POST", "/remove_worker?url=" + quote(worker, safe=""), 30)
            if status != 200:
                raise RouterError("removing %s answered HTTP %s: %s" % (worker, status, text[:300]))
        for worker in add:
            status, text = request(url, "POST", "/add_worker?url=" + quote(worker, safe=""), timeout)
            if status != 200 and "already exists" not in text:
                raise RouterError("adding %s answered HTTP %s: %s" % (worker, status, text[:300]))
        deadline = time.monotonic() + module.params["wait_healthy"]
        while True:
            healthy, total = readiness(url, 30)
            if healthy == total or time.monotonic() >= deadline:
                break
            time.sleep(1)
        after = listed(url, 30)
    except RouterError as e:
        module.fail_json(msg="E_ROUTER: %s" % e, **result)
    module.exit_json(workers=after, healthy_workers=healthy, total_workers=total, **result)


if __name__ == "__main__":
    main()
