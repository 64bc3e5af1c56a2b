#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: python_venv
short_description: The collection's own Python virtualenv on a host, with pinned packages
version_added: "0.1.0"
description:
  - Makes a virtualenv with C(python3 -m venv) and installs pinned packages into it with its own pip,
    from PyPI (or O(index_url)) or, for a host without internet, only from a folder of wheels (O(find_links)).
  - The collection's modules that need packages (nvidia-ml-py first) run with RV(interpreter).
  - Changes nothing when every package is installed at its pinned version.
  - Needs only the standard library on the host's own Python, unlike M(ansible.builtin.pip), which needs
    setuptools or packaging there.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Reports what would be made and installed, and changes nothing at O(path).
      - With O(scratch_in_check_mode), builds a throwaway virtualenv in a temporary folder and returns it as
        RV(interpreter) and RV(scratch), so that read-only checks can run in check mode on a fresh host.
        The caller removes RV(scratch).
  diff_mode:
    support: none
options:
  path:
    description: Where the virtualenv lives.
    type: path
    required: true
  packages:
    description: Requirements, pinned as C(name==version).
    type: list
    elements: str
    required: true
  python:
    description: The interpreter that makes the virtualenv.
    type: str
    default: python3
  find_links:
    description: A folder of wheels on the host; when given, pip uses it alone (C(--no-index)).
    type: path
  index_url:
    description: A package index other than PyPI.
    type: str
  scratch_in_check_mode:
    description: In check mode, when O(path) is not ready, build a throwaway virtualenv to return instead.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: The collection's virtualenv with nvidia-ml-py, from a wheelhouse
  gpuserve.llm.python_venv:
    path: /opt/gpuserve/venv
    packages: [nvidia-ml-py==13.610.43]
    find_links: /opt/gpuserve/wheelhouse
  register: venv
"""

RETURN = r"""
interpreter:
  description: The Python to run the collection's modules with.
  returned: success
  type: str
  sample: /opt/gpuserve/venv/bin/python
installed:
  description: Packages installed by this run (would be, in check mode).
  returned: success
  type: list
  elements: str
created:
  description: Whether the virtualenv was made by this run (would be, in check mode).
  returned: success
  type: bool
scratch:
  description: The throwaway virtualenv made in check mode, for the caller to remove; empty otherwise.
  returned: success
  type: str
finding:
  description: On failure, the E_VENV finding (code, severity, subject, message, fix).
  returned: failure
  type: dict
"""

import glob
import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def _parse(req):
    name, sep, version = req.partition("==")
    return _norm(name.strip()), version.strip() if sep else None


class VenvError(Exception):
    def __init__(self, message, result=None):
        Exception.__init__(self, message)
        self.result = result or {}


def _run(module, argv):
    try:
        rc, out, err = module.run_command(argv, handle_exceptions=False)
    except OSError as e:
        raise VenvError("%s could not run: %s" % (argv[0], e), dict(command=argv))
    if rc != 0:
        tail = "\n".join((err or out).strip().splitlines()[-15:])
        raise VenvError("%s failed (rc %d): %s" % (" ".join(argv), rc, tail),
                        dict(rc=rc, stdout=out, stderr=err, command=argv))
    return out


# What the virtualenv holds, read by its own interpreter through importlib.metadata: what `pip list` reports,
# without starting pip (about a tenth of its CPU).
_LIST_INSTALLED = ("import importlib.metadata as m, json; print(json.dumps("
                   "[[d.metadata['Name'], d.version] for d in m.distributions() if d.metadata['Name']]))")


def _installed_dirs(path):
    """What the virtualenv holds, from its site-packages' NAME-VERSION.dist-info folders (the wheel format's
    names: the same as importlib.metadata reads from them), or None where that is not all there is to read.
    This runs on every run of every host: the interpreter's read took ~125 ms of CPU, this ~1 ms."""
    found = {}
    sites = glob.glob(os.path.join(path, "lib", "python*", "site-packages"))
    if len(sites) != 1:
        return None
    for entry in os.listdir(sites[0]):
        if entry.endswith(".egg-info") or entry.endswith(".egg-link"):
            return None
        if entry.endswith(".dist-info"):
            name, sep, version = entry[:-len(".dist-info")].rpartition("-")
            if not sep or not name or not version:
                return None
            found[_norm(name)] = version
    return found


def _installed(module, path, python):
    have = _installed_dirs(path)
    if have is None:
        out = _run(module, [python, "-c", _LIST_INSTALLED])
        have = dict((_norm(name), version) for name, version in json.loads(out))
    return have


def _missing(module, path, packages):
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        return list(packages), True
    have = _installed(module, path, python)
    missing = []
    for req in packages:
        name, version = _parse(req)
        if name not in have or (version and have[name] != version):
            missing.append(req)
    return missing, False


def _build(module, path, packages, python, find_links, index_url):
    created = False
    if not os.path.exists(os.path.join(path, "bin", "python")):
        _run(module, [python, "-m", "venv", path])
        created = True
    if packages:
        # --no-compile: Python compiles what the modules import when they first import it; pip would compile
        # every file of every package (5.7 s of CPU for the 27 host packages on a test host, 2.5 s without).
        argv = [os.path.join(path, "bin", "python"), "-m", "pip", "install", "--disable-pip-version-check",
                "--no-input", "--quiet", "--no-compile"]
        if find_links:
            argv += ["--no-index", "--find-links", find_links]
        elif index_url:
            argv += ["--index-url", index_url]
        _run(module, argv + list(packages))
    return created


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            packages=dict(type="list", elements="str", required=True),
            python=dict(type="str", default="python3"),
            find_links=dict(type="path"),
            index_url=dict(type="str"),
            scratch_in_check_mode=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("find_links", "index_url")],
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"]
    result = dict(changed=False, interpreter=os.path.join(path, "bin", "python"), installed=[], created=False,
                  scratch="")
    scratch = None
    try:
        missing, absent = _missing(module, path, p["packages"])
        result.update(installed=missing, created=absent, changed=bool(missing or absent))
        if not result["changed"]:
            module.exit_json(**result)
        # Asked only when something is to be made (an interpreter's start less on every run of every host).
        python = module.get_bin_path(p["python"]) or p["python"]
        try:
            _run(module, [python, "-c", "import venv, ensurepip"])
        except VenvError as e:
            raise VenvError("%s cannot make a virtualenv (Debian/Ubuntu: install python3-venv): %s"
                            % (p["python"], e), e.result)
        if module.check_mode:
            if p["scratch_in_check_mode"]:
                scratch = tempfile.mkdtemp(prefix="gpuserve-check-venv-")
                _build(module, scratch, p["packages"], python, p["find_links"], p["index_url"])
                result.update(interpreter=os.path.join(scratch, "bin", "python"), scratch=scratch)
            module.exit_json(**result)
        _build(module, path, missing, python, p["find_links"], p["index_url"])
        still = _missing(module, path, p["packages"])[0]
        if still:
            raise VenvError("pip finished but %s are still not installed at the pinned versions" % ", ".join(still))
    except VenvError as e:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        f = finding("E_VENV", path, str(e))
        module.fail_json(msg="E_VENV: %s" % e, finding=f, **e.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
