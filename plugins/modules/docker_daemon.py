#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_daemon
short_description: Read the Docker daemon, guard a restart or package change, reload it, and wait for a configuration
version_added: "0.1.0"
description:
  - Reads the daemon through its Engine API with the standard library (the system Python is enough; it runs before
    the collection's virtualenv exists) - whether it answers, live restore, its data root and runtimes, its
    containers with their labels and state, and for a data-root move its images.
  - With O(guard), the restart guard decides whether a daemon restart, a data-root move or a Docker package change
    may go ahead; refused, it is an E_DOCKER_RESTART failure naming the containers (and images) it would stop or strand.
  - With O(reload), asks the running daemon to reload its configuration file - C(systemctl reload docker) with
    systemd, else SIGHUP to the pid in O(pidfile) - which applies C(runtimes) and C(live-restore) and keeps every
    container running.
  - With O(expect), waits until the daemon answers and reports what its configuration says (live restore, the
    runtimes, the data root); otherwise E_DOCKER naming what differs.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads and guards as in a real run; a reload is reported (changed) and not sent; O(expect) is not waited for.
  diff_mode:
    support: none
options:
  docker_host:
    description: The daemon's API, C(unix://PATH) or C(tcp://HOST:PORT).
    type: str
    default: unix:///var/run/docker.sock
  guard:
    description: The change about to be made - V(none), V(restart), V(data_root) or V(package).
    type: str
    choices: [none, restart, data_root, package]
    default: none
  policy:
    description: host_docker_restart - V(refuse) containers the collection does not own, or V(allow) it.
    type: str
    choices: [allow, refuse]
    default: refuse
  live_restore_after:
    description: Live restore in the configuration the daemon restarts with, when it differs from the running one's.
    type: bool
  versions:
    description: For a package change, the installed and the candidate version of the Docker package.
    type: list
    elements: str
    default: []
  reload:
    description: Ask the running daemon to reload its configuration file (nothing is sent when it does not answer).
    type: bool
    default: false
  systemd:
    description: The host runs systemd - reload through C(systemctl reload docker); else SIGHUP to O(pidfile)'s pid.
    type: bool
    default: false
  pidfile:
    description: Where dockerd writes its pid (its own C(--pidfile), default C(/var/run/docker.pid)).
    type: path
    default: /var/run/docker.pid
  expect:
    description:
      - What the daemon must report, waited for up to O(timeout) seconds - C(live_restore) (bool), C(runtimes)
        (names that must be registered), C(data_root) (path).
    type: dict
  timeout:
    description: Seconds to wait for O(expect).
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: May the Docker package change now?
  gpuserve.llm.docker_daemon:
    guard: package
    versions: ["20.10.24+dfsg1-1+deb12u1", "20.10.24+dfsg1-1+deb12u2"]

- name: Apply runtimes and live-restore with a reload, and wait until the daemon shows them
  gpuserve.llm.docker_daemon:
    reload: true
    expect: {live_restore: true, runtimes: [nvidia]}
"""

RETURN = r"""
answers:
  description: Whether the daemon answered.
  returned: always
  type: bool
live_restore:
  description: The running daemon's live restore (LiveRestoreEnabled).
  returned: success
  type: bool
data_root:
  description: The running daemon's data root (DockerRootDir).
  returned: success
  type: str
runtimes:
  description: The runtimes the daemon knows.
  returned: success
  type: list
  elements: str
containers:
  description: The daemon's containers - name, state and whether the collection owns it.
  returned: success
  type: list
  elements: dict
guard:
  description: The restart guard's answer - go, stops, foreign, stranded.
  returned: success
  type: dict
reloaded:
  description: Whether a reload was sent (or would be, in check mode).
  returned: success
  type: bool
finding:
  description: On failure, the finding (E_DOCKER_RESTART, or E_DOCKER when the daemon does not show what was expected).
  returned: failure
  type: dict
"""

import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import docker_restart
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.daemon_state import differs, reported, state


def main():
    module = AnsibleModule(
        argument_spec=dict(
            docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
            guard=dict(type="str", default="none", choices=["none", "restart", "data_root", "package"]),
            policy=dict(type="str", default="refuse", choices=["allow", "refuse"]),
            live_restore_after=dict(type="bool"),
            versions=dict(type="list", elements="str", default=[]),
            reload=dict(type="bool", default=False),
            systemd=dict(type="bool", default=False),
            pidfile=dict(type="path", default="/var/run/docker.pid"),
            expect=dict(type="dict"),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    daemon = p["docker_host"]
    now = state(daemon, images=p["guard"] == "data_root")
    result = dict(reported(now), changed=False, reloaded=False)

    verdict = docker_restart.decide(now["listed"], now.get("live_restore", False), p["guard"], policy=p["policy"],
                                    daemon=daemon, versions=p["versions"] or None,
                                    live_restore_after=p["live_restore_after"], images=now["images"])
    result["guard"] = dict((k, verdict[k]) for k in ("go", "stops", "foreign", "stranded"))
    if not verdict["go"]:
        f = verdict["finding"]
        module.fail_json(msg="%s: %s" % (f["code"], f["message"]), finding=f, **result)

    if p["reload"] and now["answers"]:
        result.update(changed=True, reloaded=True)
        if not module.check_mode:
            if p["systemd"]:
                rc, out, err = module.run_command(["systemctl", "reload", "docker"])
                if rc != 0:
                    fail(module, "E_DOCKER", daemon, "systemctl reload docker failed (rc %d): %s"
                         % (rc, (err or out).strip()), **result)
            else:
                try:
                    with open(p["pidfile"]) as f:
                        pid = int(f.read().strip())
                    os.kill(pid, signal.SIGHUP)
                except (IOError, OSError, ValueError) as e:
                    fail(module, "E_DOCKER", daemon, "the reload signal could not be sent to dockerd (pid file %s): %s"
                         % (p["pidfile"], e), **result)

    if p["expect"] and not module.check_mode:
        deadline = time.time() + p["timeout"]
        while True:
            now = state(daemon)
            problems = differs(now, p["expect"])
            if not problems:
                break
            if time.time() > deadline:
                fail(module, "E_DOCKER", daemon, "the Docker daemon at %s does not show its configuration after %d s: "
                     "%s (its log says why: journalctl -u docker, or /var/log/docker.log)"
                     % (daemon, p["timeout"], "; ".join(problems)), **result)
            time.sleep(0.5)
        result.update(reported(now))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
