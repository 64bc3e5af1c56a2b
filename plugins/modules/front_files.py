#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: front_files
short_description: A front's folder and its files (configuration, scripts, certificate and key) in one call
version_added: "0.1.0"
description:
  - Makes the front's folder with its mode, writes each file whose content or mode differs, and removes the
    files named in O(absent). One call where a task a file took a round trip to the host each (the front's
    role runs on every run of every host).
  - Each file is written whole or not at all (a temporary file beside it, renamed over it). A missing parent
    folder of a file outside O(folder) is made C(0755).
  - A file given by O(files[].secret_content) (a private key) is never shown - not in the task's arguments,
    its result or its diff.
  - A file that cannot be written is an E_FRONT failure naming it; the files written before it stay.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the folder and the files and reports what would be written or removed; writes nothing.
  diff_mode:
    support: full
    details: Each changed file's text before and after; a secret file's says only that it changes.
options:
  folder:
    description: The front's folder, made when missing.
    type: path
    required: true
  folder_mode:
    description: The folder's mode (octal, as a string), set when it differs.
    type: str
    default: "0700"
  files:
    description: The files to hold these contents.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: The file, absolute or relative to O(folder).
        type: path
        required: true
      content:
        description: Its text.
        type: str
      secret_content:
        description: Its text, never shown (a private key).
        type: str
      mode:
        description: Its mode (octal, as a string).
        type: str
        default: "0644"
  absent:
    description: Files to remove when they are there, absolute or relative to O(folder).
    type: list
    elements: path
    default: []
  served_file:
    description:
      - A file, relative to O(folder), where the caller records RV(digest) once the front serves these files (after
        a reload nginx took, or a start). RV(unserved) says whether it records another digest or none, so that a
        caller whose reload was refused reloads again on its next run, although the files are written already.
      - Read only; the module never writes it.
    type: path
"""

EXAMPLES = r"""
- name: Write the front's files
  gpuserve.llm.front_files:
    folder: /var/lib/gpuserve/front/gpuserve-llm-front
    files:
      - {path: front.conf, content: "{{ lookup('ansible.builtin.template', 'front.conf.j2') }}", mode: "0600"}
      - {path: front.key, secret_content: "{{ lookup('ansible.builtin.file', key_file, rstrip=false) }}", mode: "0600"}
    absent: [front.crt]
  register: front_written
"""

RETURN = r"""
written:
  description: The files written (in check mode, that would be), in the order given.
  returned: success
  type: list
  elements: str
removed:
  description: The files removed (in check mode, that would be).
  returned: success
  type: list
  elements: str
folder_changed:
  description: Whether the folder was made or its mode set.
  returned: success
  type: bool
digest:
  description: SHA-256 of the files as given (each path, mode and content) and the files named absent.
  returned: success
  type: str
unserved:
  description: Whether O(served_file) holds another digest than RV(digest), or is missing (false without O(served_file)).
  returned: success
  type: bool
finding:
  description: On failure, the finding (E_FRONT naming the file, E_CONFIG for an option).
  returned: failure
  type: dict
"""

import hashlib
import os
import stat

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import write_bytes
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail

SECRET_NOT_SHOWN = "(a secret: its content is not shown)\n"


def octal(module, name, value, shown):
    try:
        mode = int(value, 8)
    except (TypeError, ValueError):
        mode = -1
    if not 0 <= mode <= 0o7777:
        fail(module, "E_CONFIG", name, "%s is %r; allowed: an octal mode such as 0644" % (name, value), **shown)
    return mode


def current(path):
    """(bytes, mode) of the file, or (None, None) when it is not a file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        return data, stat.S_IMODE(os.stat(path).st_mode)
    except (IOError, OSError):
        return None, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            folder=dict(type="path", required=True),
            folder_mode=dict(type="str", default="0700"),
            files=dict(type="list", elements="dict", default=[], options=dict(
                path=dict(type="path", required=True),
                content=dict(type="str"),
                secret_content=dict(type="str", no_log=True),
                mode=dict(type="str", default="0644"),
            ), mutually_exclusive=[("content", "secret_content")], required_one_of=[("content", "secret_content")]),
            absent=dict(type="list", elements="path", default=[]),
            served_file=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    folder = p["folder"]
    # What Ansible shows of the task's arguments (-vvv): each file's size and digest, not its text (~30 KB a
    # front on every run), and nothing of a secret's.
    shown = dict(invocation=dict(module_args=dict(p, files=[dict(
        path=f["path"], mode=f["mode"], content="%d bytes, sha256 %s" % (
            len(f["content"].encode("utf-8")), hashlib.sha256(f["content"].encode("utf-8")).hexdigest()[:16])
        if f["content"] is not None else "(a secret: not shown)") for f in p["files"]])))
    folder_mode = octal(module, "folder_mode", p["folder_mode"], shown)

    def where(path):
        return path if os.path.isabs(path) else os.path.join(folder, path)

    folder_changed = not os.path.isdir(folder) or stat.S_IMODE(os.stat(folder).st_mode) != folder_mode
    plan, diffs = [], []
    digest = hashlib.sha256()
    for item in p["files"]:
        path = where(item["path"])
        secret = item["secret_content"] is not None
        text = item["secret_content"] if secret else item["content"]
        data, mode = text.encode("utf-8"), octal(module, "mode of %s" % path, item["mode"], shown)
        digest.update(("%s\0%04o\0%s\0" % (path, mode, hashlib.sha256(data).hexdigest())).encode("utf-8"))
        before, before_mode = current(path)
        if before == data and before_mode == mode:
            continue
        plan.append((path, data, mode))
        if module._diff:
            diffs.append(dict(
                before_header="%s%s" % (path, "" if before_mode in (None, mode) else " (mode %04o)" % before_mode),
                after_header="%s (mode %04o)" % (path, mode),
                before=SECRET_NOT_SHOWN if secret and before is not None else
                ("" if before is None else before.decode("utf-8", "replace")),
                after=SECRET_NOT_SHOWN if secret else text))
    digest.update(("absent\0%s" % "\0".join(where(path) for path in p["absent"])).encode("utf-8"))
    digest = digest.hexdigest()
    served = current(where(p["served_file"]))[0] if p["served_file"] else digest.encode("ascii")
    gone = [where(path) for path in p["absent"] if os.path.lexists(where(path))]
    for path in gone:
        if module._diff:
            diffs.append(dict(before_header=path, after_header="%s (removed)" % path, before="(there)\n", after=""))

    result = dict(shown, changed=bool(folder_changed or plan or gone), folder_changed=folder_changed,
                  written=[step[0] for step in plan], removed=gone, digest=digest,
                  unserved=(served or b"").strip() != digest.encode("ascii"))
    if diffs:
        result["diff"] = diffs
    if not module.check_mode:
        doing = folder
        try:
            if not os.path.isdir(folder):
                os.makedirs(folder, folder_mode)
            if stat.S_IMODE(os.stat(folder).st_mode) != folder_mode:
                os.chmod(folder, folder_mode)
            for doing, data, mode in plan:
                write_bytes(doing, data, mode)
            for doing in gone:
                os.unlink(doing)
        except (IOError, OSError) as e:
            fail(module, "E_FRONT", doing, "the front's file %s could not be written or removed: %s"
                 % (doing, e.strerror or e), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
