#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: docker_daemon_json
short_description: Merge the keys the collection needs into the Docker daemon's daemon.json
version_added: "0.1.0"
description:
  - Sets keys in the Docker daemon's configuration file by merge, never from a template - every key the
    file holds that the options do not name stays as it is (another tool's, the admin's).
  - >-
    Registers the C(nvidia) runtime as C(nvidia-ctk runtime configure --runtime=docker) writes it
    (C({"path": "nvidia-container-runtime", "args": []}), the entry of that name replaced whole; other
    runtimes stay), turns on C(live-restore), and sets C(data-root) when asked.
  - A missing file is created (and its folder). A file that cannot be read, or is not one JSON object with
    unique keys, is an E_DAEMON_JSON failure naming it, and is never overwritten.
  - Written whole or not at all (a temporary file beside it, renamed over it), keeping the file's mode and
    owner; a symlinked file is written through the link. The keys keep their order; the text is rewritten
    with four-space indents, as nvidia-ctk writes it. Nothing is written when the keys already hold their values.
  - Does not signal or restart the daemon. RV(changes) says per key whether a reload (SIGHUP,
    C(systemctl reload docker)) applies it or a restart is needed, and RV(apply) what applying them all takes.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the file and reports the changes, RV(apply) and (with diff mode) the diff; writes nothing.
  diff_mode:
    support: full
    details:
      - The file's JSON before and after, both rendered the same way, so that the diff shows the keys that
        change and nothing else. The credentials of any URL (a proxy's) are masked on both sides.
options:
  path:
    description: The daemon's configuration file.
    type: path
    default: /etc/docker/daemon.json
  nvidia_runtime:
    description: Register the C(nvidia) runtime. V(false) leaves C(runtimes) as it is (a CPU host).
    type: bool
    default: true
  nvidia_runtime_path:
    description: The runtime's executable, a bare name dockerd finds on its PATH or an absolute path.
    type: str
    default: nvidia-container-runtime
  live_restore:
    description:
      - The value of C(live-restore) - with it on, containers keep running while the daemon restarts or is upgraded.
      - V(false) for a Swarm node, where Docker refuses live restore.
    type: bool
    default: true
  data_root:
    description: The daemon's data root (C(data-root)), an absolute path. Empty leaves the key as it is.
    type: str
    default: ""
  settings:
    description:
      - Other top-level keys to set, each replaced whole (for example C(log-opts)). Not C(runtimes),
        C(live-restore) or C(data-root), which have their own options.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: Register the nvidia runtime and turn on live restore, keeping the file's other keys
  gpuserve.llm.docker_daemon_json:
    data_root: /data/docker
  register: daemon_json

- name: Apply what a reload applies
  ansible.builtin.command: systemctl reload docker
  when: daemon_json.apply == 'reload'
  changed_when: true
"""

RETURN = r"""
path:
  description: The file.
  returned: always
  type: str
  sample: /etc/docker/daemon.json
created:
  description: Whether the file did not exist (and was made, or would be in check mode).
  returned: success
  type: bool
changes:
  description:
    - One entry per key set, with its value before and after (null when absent) and what applies it
      (C(reload) or C(restart)); a runtime is named C(runtimes.<name>). URL credentials are masked.
  returned: success
  type: list
  elements: dict
  sample:
    - {key: runtimes.nvidia, before: null, after: {path: nvidia-container-runtime, args: []}, applies: reload}
    - {key: live-restore, before: null, after: true, applies: reload}
    - {key: data-root, before: null, after: /data/docker, applies: restart}
apply:
  description: What applying every change takes - C(none), C(reload) or C(restart).
  returned: success
  type: str
  sample: reload
finding:
  description: On failure, the finding (E_DAEMON_JSON for the file, E_CONFIG for an option).
  returned: failure
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import daemon_json
from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import replacing
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail


def write(path, text):
    """Replace the file whole, with the mode and owner it had (0644 root for a new one)."""
    try:
        st = os.stat(path)
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except OSError:
        mode, owner = 0o644, None
    with replacing(path, mode) as tmp:
        with open(tmp, "wb") as f:
            f.write(text.encode("utf-8"))
        if owner is not None and owner != (os.getuid(), os.getgid()):
            os.chown(tmp, owner[0], owner[1])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/docker/daemon.json"),
            nvidia_runtime=dict(type="bool", default=True),
            nvidia_runtime_path=dict(type="str", default=daemon_json.NVIDIA_RUNTIME_PATH),
            live_restore=dict(type="bool", default=True),
            data_root=dict(type="str", default=""),
            settings=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    # What Ansible shows of the task's arguments (-vvv), with a proxy URL's credentials masked.
    shown = dict(invocation=dict(module_args=daemon_json.masked(p)), path=path)
    refused = daemon_json.data_root_refused(p["data_root"])
    if refused:
        fail(module, "E_CONFIG", "data_root", refused, **shown)
    own = [k for k in p["settings"] if k in daemon_json.OWN_KEYS]
    if own:
        fail(module, "E_CONFIG", "settings", "settings names %s; allowed: keys other than %s, which have their own "
             "options" % (", ".join(own), ", ".join(daemon_json.OWN_KEYS)), **shown)

    # Written through a symlink, so that the link stays.
    target = os.path.realpath(path)
    try:
        data, current = daemon_json.read(target)
        new, changes = daemon_json.merge(
            current, nvidia_runtime=p["nvidia_runtime"], nvidia_runtime_path=p["nvidia_runtime_path"],
            live_restore=p["live_restore"], data_root=p["data_root"], settings=p["settings"])
    except daemon_json.DaemonJsonError as e:
        fail(module, "E_DAEMON_JSON", path, daemon_json.left_as_is(path, e), **shown)

    result = dict(shown, created=data is None and bool(changes), **daemon_json.summary(changes))
    if module._diff:
        result["diff"] = dict(
            before_header=path, after_header=path,
            before=daemon_json.render(daemon_json.masked(current)) if data is not None else "",
            after=daemon_json.render(daemon_json.masked(new)))
    if result["changed"] and not module.check_mode:
        try:
            write(target, daemon_json.render(new))
        except (IOError, OSError) as e:
            fail(module, "E_DAEMON_JSON", path, "the Docker daemon's configuration %s could not be written: %s"
                 % (path, e.strerror or e), **shown)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
