#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apply_patches
short_description: Apply an ordered patch series to a git checkout, naming the patch that does not apply
version_added: "0.1.0"
description:
  - Applies each patch with C(git apply), in the order given, to the work tree at O(path). The first patch that does
    not apply stops the series; the failure is E_PATCH naming that patch, with git's words.
  - Meant for a fresh checkout at the pinned commit (the image stage resets it before a build).
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Checks every patch in order with C(git apply --check) against the unpatched tree and applies nothing.
  diff_mode:
    support: none
options:
  path:
    description: The git work tree.
    type: path
    required: true
  patches:
    description: Patch files on the host, in the order to apply them.
    type: list
    elements: path
    required: true
"""

EXAMPLES = r"""
- name: The series in order
  gpuserve.llm.apply_patches:
    path: /var/lib/gpuserve/image-build/vllm/src
    patches: [/var/lib/gpuserve/image-build/vllm/patches/0001-fix.patch]
"""

RETURN = r"""
applied:
  description: The patches applied, in order.
  returned: always
  type: list
  elements: str
finding:
  description: On failure, the E_PATCH finding naming the patch.
  returned: failure
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding


def main():
    module = AnsibleModule(
        argument_spec=dict(path=dict(type="path", required=True), patches=dict(type="list", elements="path", required=True)),
        supports_check_mode=True,
    )
    git = module.get_bin_path("git", required=True)
    applied = []
    for patch in module.params["patches"]:
        argv = [git, "-C", module.params["path"], "apply", "--whitespace=nowarn"]
        if module.check_mode:
            argv.append("--check")
        rc, out, err = module.run_command(argv + [patch])
        if rc != 0:
            name = os.path.basename(patch)
            f = finding("E_PATCH", name, "patch %s (number %d of the series) does not apply: %s" % (
                name, len(applied) + 1, (err or out).strip()[-1500:]), patch=name, applied_before=list(applied))
            module.fail_json(msg="E_PATCH: %s" % f["message"], finding=f, applied=applied, stderr=err)
        applied.append(os.path.basename(patch))
        if module.check_mode:
            break  # later patches depend on earlier ones; only the first can be checked on a clean tree
    module.exit_json(changed=bool(applied) and not module.check_mode, applied=applied)


if __name__ == "__main__":
    main()
