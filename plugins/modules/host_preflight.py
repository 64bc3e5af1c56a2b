#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: host_preflight
short_description: Read-only host checks before serving - PCIe ACS, IOMMU, docker group, API port, disk budget
version_added: "0.1.0"
description:
  - PCIe ACS on every bridge between the GPUs and the root complex, read from the config space in sysfs
    (E_ACS when peer requests or completions are redirected); IOMMU mode of the GPUs' groups (W_IOMMU when
    DMA is translated); the connecting user in the group owning the Docker socket (E_DOCKER_GROUP); the API
    port free at the bind address (E_PORT_BUSY); the disk budget summed per filesystem (E_DISK, with the figures).
  - A check that cannot run says so with W_TOOL_MISSING naming what is missing; nothing turns into a traceback.
  - Returns findings as data; the calling role decides what stops a host. Changes nothing.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
options:
  gpu_bus_ids:
    description: PCI bus ids of the GPUs the engine uses, as NVML gives them; ACS and IOMMU are checked for these.
    type: list
    elements: str
    default: []
  port:
    description: The API port; V(0) skips the check.
    type: int
    default: 0
  host:
    description: The API bind address.
    type: str
    default: 0.0.0.0
  engine_port:
    description: The engine's own port behind the front; V(0) skips the check.
    type: int
    default: 0
  engine_host:
    description: The engine's bind address.
    type: str
    default: 127.0.0.1
  port_in_use_by_own_engine:
    description: The collection's own engine and front hold the ports (a rerun); then they are not busy.
    type: bool
    default: false
  docker_socket:
    description: The Docker socket whose group the connecting user needs; empty skips the docker group check.
    type: path
    default: /var/run/docker.sock
  disk_budget:
    description:
      - What the later stages will write, as C(what), C(path) and C(gib); summed per filesystem.
      - What a path holds already counts against its budget - the bytes under it, or an item's C(present_bytes)
        where the caller knows it without a walk of the path (Docker's data root - the engine image's size).
    type: list
    elements: dict
    default: []
  sysfs_root:
    description: Where sysfs is mounted (tests use fixture trees).
    type: path
    default: /sys
  proc_root:
    description: Where procfs is mounted (tests use fixture trees).
    type: path
    default: /proc
"""

EXAMPLES = r"""
- name: Host checks for the recipe
  gpuserve.llm.host_preflight:
    gpu_bus_ids: ["00000000:17:00.0", "00000000:37:00.0"]
    port: 8020
    host: 0.0.0.0
    disk_budget:
      - {what: checkpoint, path: /var/lib/gpuserve/hf, gib: 180}
      - {what: image, path: /var/lib/docker, gib: 40}
"""

RETURN = r"""
findings:
  description: One entry per problem, with code, severity, subject, message, fix and details.
  returned: always
  type: list
  elements: dict
acs:
  description: Per bridge above the GPUs, the ACS control word and its flags.
  returned: always
  type: dict
iommu:
  description: The kernel's iommu options and each GPU's IOMMU group type (null = no IOMMU; unknown = the GPU is
    not in sysfs).
  returned: always
  type: dict
disk:
  description: Per filesystem, free GiB, GiB still needed and the budget items on it.
  returned: always
  type: list
  elements: dict
"""

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import host_checks


def _group_db():
    return dict((g.gr_name, (g.gr_gid, list(g.gr_mem))) for g in grp.getgrall())


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpu_bus_ids=dict(type="list", elements="str", default=[]),
            port=dict(type="int", default=0),
            host=dict(type="str", default="0.0.0.0"),
            engine_port=dict(type="int", default=0),
            engine_host=dict(type="str", default="127.0.0.1"),
            port_in_use_by_own_engine=dict(type="bool", default=False),
            docker_socket=dict(type="path", default="/var/run/docker.sock"),
            disk_budget=dict(type="list", elements="dict", default=[]),
            sysfs_root=dict(type="path", default="/sys"),
            proc_root=dict(type="path", default="/proc"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    findings = []

    acs_findings, acs = host_checks.check_acs(p["sysfs_root"], p["gpu_bus_ids"])
    findings += acs_findings
    iommu_findings, iommu = host_checks.check_iommu(p["sysfs_root"], p["proc_root"], p["gpu_bus_ids"])
    findings += iommu_findings

    if p["docker_socket"]:
        uid = os.getuid()
        try:
            user = pwd.getpwuid(uid).pw_name
        except KeyError:
            user = str(uid)
        try:
            socket_gid = os.stat(p["docker_socket"]).st_gid
        except OSError:
            socket_gid = None  # no socket: the daemon check (E_DOCKER) says so
        findings += host_checks.check_docker_group(user, uid, os.getgroups(), socket_gid, _group_db())

    if not p["port_in_use_by_own_engine"]:
        for port, host in ((p["port"], p["host"]), (p["engine_port"], p["engine_host"])):
            if port:
                findings += host_checks.check_port(p["proc_root"], host, port)

    budget = []
    for item in p["disk_budget"]:
        if not item.get("path") or item.get("gib") is None:
            module.fail_json(msg="E_CONFIG: each disk_budget item needs path and gib: %r" % (item,))
        budget.append({"what": item.get("what", item["path"]), "path": item["path"], "gib": float(item["gib"]),
                       "present_bytes": None if item.get("present_bytes") in (None, "") else int(item["present_bytes"])})
    disk_findings, disk = host_checks.check_disk(budget)
    findings += disk_findings

    module.exit_json(changed=False, findings=findings, acs=acs, iommu=iommu, disk=disk)


if __name__ == "__main__":
    main()
