#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: apt_packages
short_description: Pinned apt repositories and packages, planned before anything changes, honest in check mode
version_added: "0.1.0"
description:
  - Fetches each repository's signing key and checks it against its pinned fingerprint before anything is
    written or installed; a key that cannot be fetched, or whose primary key is not the pinned one, is an
    E_APT_KEY failure and nothing changes. No gpg is needed on the host (the key is read with the standard library).
  - Writes each repository's keyring (C(/etc/apt/keyrings/gpuserve-NAME.gpg)) and source
    (C(/etc/apt/sources.list.d/gpuserve-NAME.list), with C(signed-by) naming that keyring only), refreshes the
    package lists when a source changed, the lists are empty, or a wanted package is missing and they are older
    than O(cache_valid_time), then asks apt for the plan (C(apt-get -s install)) and installs it.
  - A repository whose lists apt refuses for their signature is E_APT_KEY; any other apt failure is E_PACKAGES
    with apt's words.
  - With O(install=false) it stops after the plan, so that a caller can judge the plan (the Docker restart guard)
    before any package changes.
  - Runs with the system Python and C(apt-get) alone (no python3-apt), so it works on a bare host.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details:
      - Keys are fetched and checked; nothing is written. When the lists would be refreshed, they are fetched into a
        temporary folder with the new sources beside the host's own, and the plan is apt's simulation against them,
        so that every package a real run would install is listed. The folder is removed.
  diff_mode:
    support: none
options:
  packages:
    description:
      - The packages, each C(name) (any version; installed once, never upgraded), C(name=version) (pinned), or the
        absolute path of a .deb file on the host (installed with its dependencies from the repositories).
    type: list
    elements: str
    default: []
  sources:
    description: Repositories to add, each with its signing key pinned.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: A short name for the keyring and list files (C(docker), C(nvidia)).
        type: str
        required: true
      uri:
        description: The repository's URL.
        type: str
        required: true
      suite:
        description: The suite (a codename, or C(/) for a flat repository such as NVIDIA's).
        type: str
        required: true
      components:
        description: The components (none for a flat repository).
        type: list
        elements: str
        default: []
      key_url:
        description: Where the repository's signing key is published (ASCII-armored or binary OpenPGP).
        type: str
        required: true
      key_fingerprint:
        description: The fingerprint its primary key must have (40 hex digits; spaces allowed).
        type: str
        required: true
  install:
    description: Install the plan. V(false) stops after it (keys, sources and lists are done; no package changes).
    type: bool
    default: true
  cache_valid_time:
    description: Seconds the package lists count as fresh when a wanted package is missing.
    type: int
    default: 3600
  proxy:
    description: An HTTP proxy for the keys and apt (C(http://[user:password@]host:port)); empty for none.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Plan Docker and the NVIDIA Container Toolkit, keys checked first
  gpuserve.llm.apt_packages:
    packages: [docker.io, nvidia-container-toolkit=1.18.2-1]
    sources:
      - name: nvidia
        uri: https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)
        suite: /
        key_url: https://nvidia.github.io/libnvidia-container/gpgkey
        key_fingerprint: C95B321B61E88C1809C4F759DDCAE044F796ECB0
    install: false
  register: plan
"""

RETURN = r"""
plan:
  description: What apt would do (or did), one entry per package; empty when every package is there.
  returned: success
  type: list
  elements: dict
  sample: [{name: docker.io, action: install, from: null, to: 20.10.24+dfsg1-1+deb12u1}]
lines:
  description: The plan as lines for people.
  returned: success
  type: list
  elements: str
  sample: ["install docker.io 20.10.24+dfsg1-1+deb12u1"]
installed:
  description: The wanted packages' installed versions before this run (name -> version; absent when not installed).
  returned: success
  type: dict
signing_keys:
  description: Each source's key as fetched, its fingerprint, and whether its keyring or list file changed.
  returned: success
  type: list
  elements: dict
lists_updated:
  description: Whether the package lists were refreshed (in check mode, into a temporary folder).
  returned: success
  type: bool
finding:
  description: On failure, the finding (E_APT_KEY or E_PACKAGES).
  returned: failure
  type: dict
"""

import glob
import os
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.gpuserve.llm.plugins.module_utils import apt_plan, openpgp
from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import replacing
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail

KEYRINGS = "/etc/apt/keyrings"
SOURCES = "/etc/apt/sources.list.d"
LISTS = "/var/lib/apt/lists"


def keyring_path(name, root=KEYRINGS):
    return os.path.join(root, "gpuserve-%s.gpg" % name)


def list_path(name, root=SOURCES):
    return os.path.join(root, "gpuserve-%s.list" % name)


def list_text(source, keyring):
    return ("# gpuserve.llm host stage: %s, its signing key pinned (%s)\n%s\n" % (
        source["name"], openpgp.normal(source["key_fingerprint"]),
        apt_plan.source_line(source["uri"], source["suite"], source["components"], keyring)))


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except (IOError, OSError):
        return None


def write(path, data, mode=0o644):
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    with replacing(path, mode) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


class Apt(object):
    def __init__(self, module, proxy):
        self.module = module
        self.env = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C", "LANG": "C"}
        if proxy:
            self.env.update(http_proxy=proxy, https_proxy=proxy, HTTP_PROXY=proxy, HTTPS_PROXY=proxy)
        self.options = []

    def run(self, args):
        rc, out, err = self.module.run_command(["apt-get"] + self.options + args, environ_update=self.env)
        return rc, out + err

    def installed(self, names):
        """name -> version of the installed ones."""
        _rc, out, _err = self.module.run_command(
            ["dpkg-query", "-W", "-f", "${Package}\t${Status}\t${Version}\n"] + list(names), environ_update=self.env)
        found = {}
        for line in out.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[1].endswith(" installed"):
                found[parts[0]] = parts[2]
        return found


def fetch_key(module, source):
    url = source["key_url"]
    try:
        if url.startswith("/"):
            with open(url, "rb") as f:
                data = f.read()
        else:
            # open_url takes the proxy from the environment (main() sets it from the proxy option).
            data = open_url(url, timeout=60, http_agent="gpuserve.llm", follow_redirects="safe").read()
    except Exception as e:  # any failure to fetch: network, HTTP status, file
        fail(module, "E_APT_KEY", url, "the signing key of the %s repository could not be fetched from %s: %s; nothing "
             "was installed" % (source["name"], url, e))
    try:
        binary, found = openpgp.primary_fingerprints(data)
    except openpgp.KeyProblem as e:
        fail(module, "E_APT_KEY", url, "what %s serves as the %s repository's signing key is not one: %s; nothing was "
             "installed" % (url, source["name"], e))
    want = openpgp.normal(source["key_fingerprint"])
    if found != [want]:
        fail(module, "E_APT_KEY", url, "the %s repository's signing key at %s has the fingerprint %s, not the pinned %s; "
             "nothing was installed" % (source["name"], url, ", ".join(found), want),
             details={"url": url, "pinned": want, "found": found})
    return binary, want


def scratch_apt(apt, sources, keys):
    """Check mode: the lists fetched into a temporary folder, the new sources beside the host's own."""
    tmp = tempfile.mkdtemp(prefix="gpuserve-apt-check-")
    os.chmod(tmp, 0o755)  # apt's download sandbox (user _apt) must reach the lists folder
    os.makedirs(os.path.join(tmp, "lists", "partial"))
    parts = os.path.join(tmp, "sources.list.d")
    os.makedirs(parts)
    ours = set(list_path(s["name"]) for s in sources)
    for path in glob.glob(os.path.join(SOURCES, "*")):
        if path not in ours and (path.endswith(".list") or path.endswith(".sources")):
            shutil.copy(path, parts)
    for source in sources:
        keyring = keyring_path(source["name"], tmp)
        with open(keyring, "wb") as f:
            f.write(keys[source["name"]])
        with open(list_path(source["name"], parts), "w") as f:
            f.write(list_text(source, keyring))
    apt.options = ["-o", "Dir::State::Lists=%s" % os.path.join(tmp, "lists"), "-o", "Dir::Etc::SourceParts=%s" % parts,
                   "-o", "Dir::Cache::pkgcache=", "-o", "Dir::Cache::srcpkgcache="]
    return tmp


def lists_age(lists=LISTS):
    """Seconds since the newest package list was fetched; None when there is none."""
    found = glob.glob(os.path.join(lists, "*_Packages*"))
    if not found:
        return None
    return time.time() - max(os.path.getmtime(p) for p in found)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            packages=dict(type="list", elements="str", default=[]),
            sources=dict(type="list", elements="dict", default=[], options=dict(
                name=dict(type="str", required=True),
                uri=dict(type="str", required=True),
                suite=dict(type="str", required=True),
                components=dict(type="list", elements="str", default=[]),
                key_url=dict(type="str", required=True, no_log=False),
                key_fingerprint=dict(type="str", required=True, no_log=False),
            )),
            install=dict(type="bool", default=True),
            cache_valid_time=dict(type="int", default=3600),
            proxy=dict(type="str", default="", no_log=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    apt = Apt(module, p["proxy"])
    # A .deb file on the host (host_packages_dir) is named by its path; its package and version from its control file.
    specs = []
    for item in p["packages"]:
        if item.startswith("/"):
            rc, out, err = module.run_command(["dpkg-deb", "-f", item, "Package", "Version"])
            fields = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
            if rc != 0 or "Package" not in fields:
                fail(module, "E_PACKAGES", item, "%s is not a .deb file dpkg-deb can read: %s" % (item, (err or out).strip()))
            specs.append("%s=%s" % (fields["Package"], fields.get("Version", "")))
        else:
            specs.append(item)
    try:
        wanted = [apt_plan.spec(item) for item in specs]
    except ValueError as e:
        fail(module, "E_CONFIG", "packages", str(e))
    if p["proxy"]:
        for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
            os.environ[name] = p["proxy"]

    # Every key first: a wrong one stops the host before anything is written.
    keys, key_report = {}, []
    for source in p["sources"]:
        keys[source["name"]], fpr = fetch_key(module, source)
        key_report.append({"name": source["name"], "url": source["key_url"], "fingerprint": fpr})

    changed_files = []
    for source, report in zip(p["sources"], key_report):
        keyring = keyring_path(source["name"])
        files = [(keyring, keys[source["name"]]), (list_path(source["name"]), list_text(source, keyring).encode())]
        report["changed"] = [path for path, data in files if read(path) != data]
        changed_files.extend(report["changed"])
        if not module.check_mode:
            for path, data in files:
                if path in report["changed"]:
                    write(path, data)

    names = [name for name, _version in wanted]
    installed = apt.installed(names) if names else {}
    present = apt_plan.satisfied(installed, specs)
    age = lists_age()
    refresh = bool(changed_files) or age is None or (not present and age > p["cache_valid_time"])
    result = dict(changed=bool(changed_files), signing_keys=key_report, installed=installed, plan=[], lines=[],
                  lists_updated=False)
    if present and not changed_files:
        module.exit_json(**result)

    scratch = None
    try:
        if refresh:
            if module.check_mode:
                scratch = scratch_apt(apt, p["sources"], keys)
            rc, out = apt.run(["update", "-q"])
            bad = apt_plan.signature_problem(out)
            if bad:
                fail(module, "E_APT_KEY", "apt-get update", "apt refused a repository's signature: %s; nothing was "
                     "installed" % "; ".join(bad[:3]), **result)
            if rc != 0:
                fail(module, "E_PACKAGES", "apt-get update", "apt-get update failed (rc %d): %s"
                     % (rc, " | ".join(apt_plan.tail(out))), **result)
            result["lists_updated"] = True
            result["changed"] = True
        if not names:
            module.exit_json(**result)
        rc, out = apt.run(["install", "-s", "-q", "--no-install-recommends", "--allow-downgrades"] + p["packages"])
        if rc != 0:
            fail(module, "E_PACKAGES", ", ".join(p["packages"]), "apt cannot install %s: %s"
                 % (", ".join(p["packages"]), " | ".join(apt_plan.tail(out))), **result)
        result["plan"] = apt_plan.plan(out)
        result["lines"] = [apt_plan.describe(step) for step in result["plan"]]
        if not result["plan"]:
            module.exit_json(**result)
        result["changed"] = True
        if module.check_mode or not p["install"]:
            module.exit_json(**result)
        rc, out = apt.run(["install", "-y", "-q", "--no-install-recommends", "--allow-downgrades",
                           "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]
                          + p["packages"])
        if rc != 0:
            fail(module, "E_PACKAGES", ", ".join(p["packages"]), "apt-get install failed (rc %d): %s"
                 % (rc, " | ".join(apt_plan.tail(out))), **result)
        module.exit_json(**result)
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
