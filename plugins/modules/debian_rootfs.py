#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: debian_rootfs
short_description: A Debian root filesystem with given packages, as a tarball named by a package's version
version_added: "0.1.0"
description:
  - Runs C(debootstrap --variant=minbase --include=PACKAGES SUITE) into a temporary folder, reads the installed
    version of O(version_of) from the root's dpkg status, and keeps the tree as C(NAME-VERSION.tar) in O(cache_dir).
  - Leaves out what a container does not use (apt's package lists and downloaded packages, translations,
    documentation but each package's copyright file, man and info pages), about half of a minbase root;
    every host it is copied to, and every image made from it, carries that much less.
  - Debian's unstable suite moves, so the version names the tarball and the image made from it; a cached tarball is
    reused until O(refresh) asks for a new one. Used by the image stage for llama.cpp from Debian's packages.
  - Needs root and debootstrap where it runs (the workstation).
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reports whether a tarball would be built; builds nothing.
  diff_mode:
    support: none
options:
  name:
    description: The tarball's name before the version.
    type: str
    required: true
  packages:
    description: Packages to include.
    type: list
    elements: str
    required: true
  version_of:
    description: The package whose installed version names the tarball.
    type: str
    required: true
  suite:
    description: The Debian suite.
    type: str
    default: sid
  mirror:
    description: The Debian mirror.
    type: str
    default: http://deb.debian.org/debian
  cache_dir:
    description: Where tarballs are kept.
    type: path
    required: true
  refresh:
    description: Build a new tarball even when one is cached.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: llama.cpp from Debian's packages
  gpuserve.llm.debian_rootfs:
    name: llama.cpp
    packages: [llama.cpp-tools, python3]
    version_of: llama.cpp-tools
    cache_dir: /var/cache/gpuserve/images
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
tarball:
  description: The root filesystem tarball.
  returned: success, unless in check mode with nothing cached
  type: str
version:
  description: The installed version of O(version_of).
  returned: success, unless in check mode with nothing cached
  type: str
tag:
  description: The version as a Docker tag (characters outside [A-Za-z0-9_.-] become -).
  returned: success, unless in check mode with nothing cached
  type: str
"""

import glob
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import replacing
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import CODES, fail

# The failed task shows msg alone: it carries the fix.
SHOWN_FIX = ". Fix: " + CODES["E_IMAGE"][2]


def installed_version(root, package):
    with open(os.path.join(root, "var", "lib", "dpkg", "status")) as f:
        for block in f.read().split("\n\n"):
            fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))
            if fields.get("Package") == package and "installed" in fields.get("Status", ""):
                return fields["Version"]
    return None


# What a container does not use, under the root: (folder, the names in it kept).
UNUSED = (("var/cache/apt/archives", ("partial", "lock")), ("var/lib/apt/lists", ("partial", "lock")),
          ("usr/share/locale", ("locale.alias",)), ("usr/share/man", ()), ("usr/share/info", ()),
          ("usr/share/doc", ()))


def slim(root):
    """Removes UNUSED from the root (usr/share/doc keeps each package's copyright file); the bytes removed."""
    removed = 0
    for folder, keep in UNUSED:
        top = os.path.join(root, folder)
        if not os.path.isdir(top) or os.path.islink(top):
            continue
        for name in os.listdir(top):
            path = os.path.join(top, name)
            if name in keep:
                continue
            if folder == "usr/share/doc" and os.path.isdir(path) and not os.path.islink(path):
                for inner in os.listdir(path):
                    if inner != "copyright":
                        removed += _remove(os.path.join(path, inner))
                continue
            removed += _remove(path)
    return removed


def _remove(path):
    size = 0
    if os.path.isdir(path) and not os.path.islink(path):
        for folder, _dirs, files in os.walk(path):
            size += sum(os.lstat(os.path.join(folder, f)).st_size for f in files)
        shutil.rmtree(path)
    else:
        size = os.lstat(path).st_size
        os.remove(path)
    return size


def docker_tag(version):
    return re.sub(r"[^A-Za-z0-9_.-]", "-", version)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str", required=True),
            packages=dict(type="list", elements="str", required=True),
            version_of=dict(type="str", required=True),
            suite=dict(type="str", default="sid"),
            mirror=dict(type="str", default="http://deb.debian.org/debian"),
            cache_dir=dict(type="path", required=True),
            refresh=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    p = module.params
    cached = sorted(glob.glob(os.path.join(p["cache_dir"], "%s-*.tar" % p["name"])), key=os.path.getmtime)
    if cached and not p["refresh"]:
        tarball = cached[-1]
        version = os.path.basename(tarball)[len(p["name"]) + 1:-len(".tar")]
        module.exit_json(changed=False, tarball=tarball, version=version, tag=docker_tag(version))
    if module.check_mode:
        module.exit_json(changed=True, msg="would debootstrap %s with %s" % (p["suite"], ", ".join(p["packages"])))

    debootstrap = module.get_bin_path("debootstrap", required=True)
    if not os.path.isdir(p["cache_dir"]):
        os.makedirs(p["cache_dir"])
    work = tempfile.mkdtemp(prefix="rootfs-", dir=p["cache_dir"])
    try:
        argv = [debootstrap, "--variant=minbase", "--include=%s" % ",".join(p["packages"]), p["suite"], work, p["mirror"]]
        rc, out, err = module.run_command(argv)
        if rc != 0:
            fail(module, "E_IMAGE", "debootstrap %s" % p["suite"], "debootstrap %s from %s failed (rc %d): %s" % (
                p["suite"], p["mirror"], rc, "\n".join((err or out).strip().splitlines()[-10:])), shown=SHOWN_FIX,
                command=argv, rc=rc)
        version = installed_version(work, p["version_of"])
        if not version:
            fail(module, "E_IMAGE", p["version_of"], "%s is not installed in the %s root"
                 % (p["version_of"], p["suite"]), shown=SHOWN_FIX)
        slim(work)
        tarball = os.path.join(p["cache_dir"], "%s-%s.tar" % (p["name"], version))
        with replacing(tarball) as tmp:
            rc, out, err = module.run_command(["tar", "-C", work, "-cf", tmp, "."])
            if rc != 0:
                fail(module, "E_IMAGE", tarball, "packing the root into %s failed: %s" % (tarball, err),
                     shown=SHOWN_FIX)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    module.exit_json(changed=True, tarball=tarball, version=version, tag=docker_tag(version))


if __name__ == "__main__":
    main()
