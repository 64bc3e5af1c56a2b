#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: container_inspect
short_description: Several containers' inspect documents (docker inspect) in one call
version_added: "0.1.0"
description:
  - Reads C(GET /containers/NAME/json) from the daemon at O(docker_host) (a C(unix://) socket or plain
    C(tcp://)) for each name in O(names), in one module run - the service stage's two slots on every run of
    every host, where one M(community.docker.docker_container_info) a name cost a module run each.
  - A container that does not exist is not an error - its place in RV(containers) is null.
  - The documents hold each container's environment (secrets among it) - run it with C(no_log).
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads only.
  diff_mode:
    support: none
options:
  names:
    description: The containers' names or ids.
    type: list
    elements: str
    required: true
  docker_host:
    description: The daemon, C(unix:///path) or C(tcp://host:port).
    type: str
    default: unix:///var/run/docker.sock
"""

EXAMPLES = r"""
- name: The engine's two slots
  gpuserve.llm.container_inspect:
    names: [gpuserve-llm-a, gpuserve-llm-b]
  register: slots
  no_log: true  # the environment holds the API key
"""

RETURN = r"""
containers:
  description: For each of O(names), in order, its inspect document as the Engine API gives it, or null when there
    is no such container.
  returned: always
  type: list
  elements: dict
"""

import socket

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import docker_api
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail


def main():
    module = AnsibleModule(
        argument_spec=dict(
            names=dict(type="list", elements="str", required=True),
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    containers = []
    for name in p["names"]:
        try:
            containers.append(docker_api.inspect(p["docker_host"], name))
        except (IOError, OSError, socket.error, ValueError) as e:
            fail(module, "E_DOCKER", p["docker_host"], "the Docker daemon at %s did not give container %s: %s"
                 % (p["docker_host"], name, e))
    module.exit_json(changed=False, containers=containers)


if __name__ == "__main__":
    main()
