#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_read
short_description: What the host stage reads before it changes anything, in one module run
version_added: "0.1.0"
description:
  - Reads, with the host's own Python and the standard library, what the host stage decides by - the
    distribution (as facts, the way M(ansible.builtin.setup) names them), whether systemd runs the host, which
    Docker Engine package is installed, what merging live-restore, the data root and the nvidia runtime into
    C(daemon.json) would change, and what the Docker daemon says of itself through its Engine API.
  - One module run where five were; the stage's later writes and waits are skipped when these reads show them
    to be no-ops (a rerun).
  - Changes nothing.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads as in a real run.
  diff_mode:
    support: none
options:
  docker_host:
    description: The daemon's API, C(unix://PATH) or C(tcp://HOST:PORT).
    type: str
    default: unix:///var/run/docker.sock
  engine_packages:
    description: The Debian packages that are a Docker Engine; RV(engines) lists those installed.
    type: list
    elements: str
    default: [docker.io, docker-ce, moby-engine]
  daemon_json:
    description: The daemon's configuration file (read through a symlink).
    type: path
    default: /etc/docker/daemon.json
  live_restore:
    description: The live-restore the file should hold.
    type: bool
    default: true
  data_root:
    description: The data root the file should hold; empty leaves it as it is.
    type: str
    default: ""
  nvidia_runtime:
    description: Also plan the nvidia runtime's registration (RV(runtime)), over the file as merged.
    type: bool
    default: false
  expect:
    description:
      - What the daemon should report - C(live_restore) (bool), C(runtimes) (names), C(data_root) (path);
        C(shows) in RV(daemon) says whether it does.
    type: dict
"""

EXAMPLES = r"""
- name: Read the host
  gpuserve.llm.host_read:
    live_restore: true
    nvidia_runtime: true
    expect: {live_restore: true, runtimes: [nvidia]}
  register: host_read
"""

RETURN = r"""
ansible_facts:
  description: distribution, distribution_version, distribution_major_version, distribution_release, os_family.
  returned: success
  type: dict
systemd:
  description: Whether systemd runs the host (C(/run/systemd/system) exists).
  returned: success
  type: bool
engines:
  description: The O(engine_packages) that dpkg says are installed (none where there is no dpkg).
  returned: success
  type: list
  elements: str
daemon_json:
  description:
    - What merging live-restore and the data root into the file would change - C(changed), C(created),
      C(changes) (key, before, after, applies), C(apply) (V(none), V(reload) or V(restart)).
  returned: success
  type: dict
runtime:
  description: The same for the nvidia runtime's registration over the merged file (nothing without O(nvidia_runtime)).
  returned: success
  type: dict
daemon:
  description:
    - What the daemon says - C(answers), C(live_restore), C(data_root), C(runtimes), C(containers) (name, state,
      whether the collection owns it); C(shows) whether that is what O(expect) asks, C(differs) what is not.
  returned: success
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.facts.system.distribution import DistributionFactCollector

from ansible_collections.gpuserve.llm.plugins.module_utils import daemon_json
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.daemon_state import differs, reported, state

DISTRIBUTION_FACTS = ("distribution", "distribution_version", "distribution_major_version", "distribution_release",
                      "os_family")


def engines(module, names):
    """The packages of `names` that dpkg says are installed."""
    dpkg_query = module.get_bin_path("dpkg-query")
    if not dpkg_query or not names:
        return []
    # rc 1 when one of the names is unknown to dpkg; the known ones are still listed
    _rc, out, _err = module.run_command([dpkg_query, "-W", "-f", "${Package} ${db:Status-Status}\n"] + list(names))
    return [line.split()[0] for line in out.splitlines() if line.split()[1:2] == ["installed"]]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
            engine_packages=dict(type="list", elements="str", default=["docker.io", "docker-ce", "moby-engine"]),
            daemon_json=dict(type="path", default="/etc/docker/daemon.json"),
            live_restore=dict(type="bool", default=True),
            data_root=dict(type="str", default=""),
            nvidia_runtime=dict(type="bool", default=False),
            expect=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["daemon_json"]
    refused = daemon_json.data_root_refused(p["data_root"])
    if refused:
        fail(module, "E_CONFIG", "data_root", refused)
    try:
        data, current = daemon_json.read(os.path.realpath(path))
        merged, changes = daemon_json.merge(current, live_restore=p["live_restore"], data_root=p["data_root"])
        runtime = daemon_json.merge(merged, nvidia_runtime=True)[1] if p["nvidia_runtime"] else []
    except daemon_json.DaemonJsonError as e:
        fail(module, "E_DAEMON_JSON", path, daemon_json.left_as_is(path, e))
    facts = DistributionFactCollector().collect(module=module)
    now = state(p["docker_host"])
    problems = differs(now, p["expect"] or {})
    module.exit_json(
        changed=False,
        ansible_facts=dict((k, facts[k]) for k in DISTRIBUTION_FACTS if k in facts),
        systemd=os.path.isdir("/run/systemd/system"),
        engines=engines(module, p["engine_packages"]),
        daemon_json=dict(daemon_json.summary(changes), path=path, created=data is None and bool(changes)),
        runtime=daemon_json.summary(runtime),
        daemon=dict(reported(now), error=now.get("error"), shows=not problems, differs=problems))


if __name__ == "__main__":
    main()
