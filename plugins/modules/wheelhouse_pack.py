#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: wheelhouse_pack
short_description: A folder of wheels packed as one tar on the workstation, to copy to hosts in one transfer
version_added: "0.1.0"
description:
  - Packs the wheels of O(src) into one uncompressed tar at O(dest) (wheels are zip files already), in name order
    with fixed owners and modes, so that the host_venv role copies one file per host with M(ansible.builtin.unarchive)
    instead of one copy and one stat per wheel (28 wheels took ~25 s a host over the docker connection).
  - Does nothing when O(dest) exists; name O(dest) after the wheels it holds (the role uses their names' hash).
  - Runs on the workstation (C(delegate_to) localhost).
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether it would pack, and writes nothing.
  diff_mode:
    support: none
options:
  src:
    description: The folder of wheels.
    type: path
    required: true
  dest:
    description: The tar to write.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Pack the wheelhouse once
  gpuserve.llm.wheelhouse_pack:
    src: /srv/wheels
    dest: ~/.cache/gpuserve/wheelhouse-0123456789abcdef.tar
  delegate_to: localhost
"""

RETURN = r"""
finding:
  description: On failure, the E_VENV finding.
  returned: failure
  type: dict
path:
  description: The tar.
  returned: always
  type: str
wheels:
  description: How many wheels it holds.
  returned: always
  type: int
"""

import os
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import replacing
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail


def wheels(src):
    return sorted(n for n in os.listdir(src) if n.endswith(".whl") and os.path.isfile(os.path.join(src, n)))


def pack(src, dest, names):
    """Written whole or not at all: a concurrent run never sees half a tar."""
    with replacing(dest) as tmp:
        with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in names:
                info = tar.gettarinfo(os.path.join(src, name), arcname=name)
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mode = 0o644
                with open(os.path.join(src, name), "rb") as data:
                    tar.addfile(info, data)


def main():
    module = AnsibleModule(
        argument_spec=dict(src=dict(type="path", required=True), dest=dict(type="path", required=True)),
        supports_check_mode=True,
    )
    src, dest = module.params["src"], module.params["dest"]
    if not os.path.isdir(src):
        fail(module, "E_VENV", src, "the wheelhouse %s is not a folder on the workstation" % src)
    names = wheels(src)
    if not names:
        fail(module, "E_VENV", src, "the wheelhouse %s holds no wheels" % src)
    if os.path.isfile(dest):
        module.exit_json(changed=False, path=dest, wheels=len(names))
    if not module.check_mode:
        try:
            pack(src, dest, names)
        except (IOError, OSError, tarfile.TarError) as e:
            fail(module, "E_VENV", src, "cannot pack the wheelhouse into %s on the workstation: %s" % (dest, e))
    module.exit_json(changed=True, path=dest, wheels=len(names))


if __name__ == "__main__":
    main()
