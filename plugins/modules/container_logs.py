#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: container_logs
short_description: A container's log (docker logs) from the Docker Engine API
version_added: "0.1.0"
description:
  - Reads C(GET /containers/NAME/logs) from the daemon at O(docker_host) (a C(unix://) socket or plain C(tcp://)),
    stdout and stderr, as C(docker logs) shows them. community.docker has no module for logs; this one speaks the
    Engine API with the standard library.
  - Returns the last O(tail) lines; with O(dest), writes the whole log to that file on the host.
  - A container that does not exist is not an error - RV(found) says so.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads only; O(dest) is written in check mode too (it is the run's output, on the host).
  diff_mode:
    support: none
options:
  name:
    description: The container's name or id.
    type: str
    required: true
  docker_host:
    description: The daemon, C(unix:///path) or C(tcp://host:port).
    type: str
    default: unix:///var/run/docker.sock
  tail:
    description: How many of the last lines to return.
    type: int
    default: 40
  dest:
    description: Write the whole log to this file on the host.
    type: path
"""

EXAMPLES = r"""
- name: The engine's last lines
  gpuserve.llm.container_logs:
    name: gpuserve-llm-a
    tail: 40
  register: engine_log
"""

RETURN = r"""
found:
  description: Whether the container exists.
  returned: always
  type: bool
lines:
  description: The last O(tail) lines of the log (stdout and stderr, in order).
  returned: always
  type: list
  elements: str
dest:
  description: The file the whole log was written to.
  returned: when O(dest) is given and the container exists
  type: str
"""

import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils import docker_api


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
            tail=dict(type="int", default=40),
            dest=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        info = docker_api.inspect(p["docker_host"], p["name"])
        if info is None:
            module.exit_json(changed=False, found=False, lines=[])
        text = docker_api.logs(p["docker_host"], p["name"], info.get("Config", {}).get("Tty", False))
    except (IOError, OSError, socket.error, ValueError) as e:
        module.fail_json(msg="cannot read the logs of %s from %s: %s" % (p["name"], p["docker_host"], e))
    result = dict(changed=False, found=True, lines=text.splitlines()[-p["tail"]:] if p["tail"] > 0 else [])
    if p["dest"]:
        directory = os.path.dirname(p["dest"])
        if directory and not os.path.isdir(directory):
            os.makedirs(directory)
        with open(p["dest"], "w") as f:
            f.write(text)
        result["dest"] = p["dest"]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
