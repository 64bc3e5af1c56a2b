#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: job_progress
short_description: A background job's state and its own progress report, waiting for its end a while
version_added: "0.1.0"
description:
  - Reads the results file of a task started with C(async) and C(poll=0) (the C(results_file) its register holds)
    and the progress file the job writes (as M(gpuserve.llm.hub_snapshot) does), or the state of a container
    started detached. While the job runs, returns a line with the phase and the bytes done and due; once it ended,
    returns the job's own result.
  - Meant for a loop with C(break_when), whose label prints the line per host. With O(wait) at the progress interval
    the loop prints a line per interval and ends when the job does; a loop pausing between quick looks ends up to
    a whole interval after it.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Only reads.
  diff_mode:
    support: none
options:
  results_file:
    description: The async job's results file. One of O(results_file) and O(container).
    type: path
  progress_file:
    description: The job's progress file, if it writes one.
    type: path
  container:
    description: A container started detached, the job; it ended once it is no longer running (or gone).
    type: str
  docker_host:
    description: The Docker daemon of O(container).
    type: str
    default: unix:///var/run/docker.sock
  wait:
    description: Seconds to watch for the job's end before answering; it answers as soon as the job ends.
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: Downloading
  gpuserve.llm.job_progress:
    results_file: "{{ job.results_file }}"
    progress_file: /var/lib/gpuserve/weights/progress-main.json
    wait: 30
  register: wait
  loop: "{{ range(720) | list }}"
  loop_control:
    break_when: wait.finished
    label: "{{ wait.line | default('starting') }}"
"""

RETURN = r"""
finished:
  description: Whether the job ended (well or not).
  returned: always
  type: bool
line:
  description: What the job is doing - phase, bytes done of due, rate, seconds.
  returned: always
  type: str
progress:
  description: The progress file's content.
  returned: always
  type: dict
job:
  description: The job's own result once it ended (its C(failed) and C(msg) included); for a container, its C(State).
  returned: when finished
  type: dict
finding:
  description: The E_DOCKER finding when the daemon did not answer for O(container).
  returned: on failure
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import docker_api
from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import read_json
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.progress import progress_line

LOOK_EVERY = 0.5  # seconds between looks while waiting


def async_job(results_file):
    """(finished, the job's result) from an async task's results file."""
    job = read_json(results_file) or {}
    return bool(job.get("finished", 1 if job and "started" not in job else 0)), job


def container_job(docker_host, name):
    """(finished, its State) of a detached container: it ended when no longer running, or gone."""
    state = (docker_api.inspect(docker_host, name) or {}).get("State", {})
    return not state.get("Running", False), state


def main():
    module = AnsibleModule(
        argument_spec=dict(results_file=dict(type="path"),
                           progress_file=dict(type="path"),
                           container=dict(type="str"),
                           docker_host=dict(type="str", default="unix:///var/run/docker.sock"),
                           wait=dict(type="int", default=0)),
        required_one_of=[("results_file", "container")],
        mutually_exclusive=[("results_file", "container")],
        supports_check_mode=True,
    )
    p = module.params

    def look():
        if p["container"]:
            return container_job(p["docker_host"], p["container"])
        return async_job(p["results_file"])

    deadline = time.time() + max(p["wait"], 0)
    try:
        finished, job = look()
        while not finished and time.time() < deadline:
            time.sleep(LOOK_EVERY)
            finished, job = look()
    except (IOError, OSError) as e:  # only a container is asked over the network
        why = "the Docker daemon at %s did not say how container %s is: %s" % (p["docker_host"], p["container"], e)
        fail(module, "E_DOCKER", p["docker_host"], why)
    progress = (read_json(p["progress_file"]) if p["progress_file"] else None) or {}
    result = dict(changed=False, finished=finished, progress=progress,
                  line="done" if finished else progress_line(progress))
    if finished:
        result["job"] = job
    module.exit_json(**result)


if __name__ == "__main__":
    main()
