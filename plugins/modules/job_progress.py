#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: job_progress
short_description: A background job's state and its own progress report, in one look
version_added: "0.1.0"
description:
  - Reads the results file of a task started with C(async) and C(poll=0) (the C(results_file) its register holds)
    and the progress file the job writes (as M(gpuserve.llm.hub_snapshot) does). While the job runs, returns a line
    with the phase and the bytes done and due; once it ended, returns the job's own result.
  - Meant for a loop with C(loop_control.pause) and C(break_when), whose label prints the line per host.
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
    description: The async job's results file.
    type: path
    required: true
  progress_file:
    description: The job's progress file.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Downloading
  gpuserve.llm.job_progress:
    results_file: "{{ job.results_file }}"
    progress_file: /var/lib/gpuserve/weights/progress-main.json
  register: wait
  loop: "{{ range(720) | list }}"
  loop_control:
    pause: 30
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
  description: The job's own result once it ended (its C(failed) and C(msg) included).
  returned: when finished
  type: dict
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils.hub import progress_line


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError, ValueError):
        return None  # not written yet, or being replaced


def main():
    module = AnsibleModule(
        argument_spec=dict(results_file=dict(type="path", required=True),
                           progress_file=dict(type="path", required=True)),
        supports_check_mode=True,
    )
    job = read_json(module.params["results_file"]) or {}
    progress = read_json(module.params["progress_file"]) or {}
    finished = bool(job.get("finished", 1 if job and "started" not in job else 0))
    result = dict(changed=False, finished=finished, progress=progress,
                  line="done" if finished else progress_line(progress))
    if finished:
        result["job"] = job
    module.exit_json(**result)


if __name__ == "__main__":
    main()
