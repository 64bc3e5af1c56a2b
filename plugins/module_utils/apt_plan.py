# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Pure parts of the host stage's apt work: package specs, the source line of a pinned repository,
apt-get's simulation read as a plan, and which apt failures mean a repository's signature."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# apt-get -s: "Inst name [old] (new release [arch])", "Remv name [old]"; Conf lines repeat Inst.
_INST = re.compile(r"^Inst (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])? \((?P<new>\S+)")
_REMV = re.compile(r"^Remv (?P<name>\S+)(?: \[(?P<old>[^\]]+)\])?")
# What apt-get update says when a repository is not signed by a key it trusts (apt 2.x wording).
_SIGNATURE = re.compile(r"NO_PUBKEY|EXPKEYSIG|REVKEYSIG|BADSIG|is not signed|signatures were invalid|"
                        r"signatures couldn't be verified|Signed-By", re.I)
NAME = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def spec(item):
    """'name' or 'name=version' as (name, version or None)."""
    name, _sep, version = str(item).partition("=")
    name, version = name.strip(), version.strip() or None
    if not NAME.match(name):
        raise ValueError("%r is not a Debian package name" % name)
    return name, version


def satisfied(installed, wanted):
    """Whether `installed` ({name: version} of installed packages) holds every wanted spec."""
    for item in wanted:
        name, version = spec(item)
        if name not in installed or (version is not None and installed[name] != version):
            return False
    return True


def source_line(uri, suite, components, keyring):
    """A one-line-style source with its key pinned: 'deb [signed-by=KEYRING] URI SUITE COMPONENTS'.
    A flat repository (NVIDIA's) has the suite '/' and no components."""
    parts = ["deb", "[signed-by=%s]" % keyring, uri, suite] + list(components or [])
    return " ".join(parts)


def plan(simulation):
    """apt-get -s install's output as [{name, action, from, to}]; action is install, upgrade,
    downgrade (apt lists a downgrade as an Inst too: told apart by the caller's versions) or remove."""
    out = []
    for line in simulation.splitlines():
        m = _INST.match(line)
        if m:
            out.append({"name": m.group("name"), "action": "upgrade" if m.group("old") else "install",
                        "from": m.group("old"), "to": m.group("new")})
            continue
        m = _REMV.match(line)
        if m:
            out.append({"name": m.group("name"), "action": "remove", "from": m.group("old"), "to": None})
    return out


def describe(step):
    """One line of the plan for people: 'install docker.io 20.10.24+dfsg1-1+deb12u1'."""
    if step["action"] == "remove":
        return "remove %s %s" % (step["name"], step["from"] or "")
    if step["action"] == "upgrade":
        return "change %s %s -> %s" % (step["name"], step["from"], step["to"])
    return "install %s %s" % (step["name"], step["to"])


def signature_problem(output):
    """The lines of apt-get update's output that say a repository's signature did not verify."""
    return [line.strip() for line in output.splitlines()
            if _SIGNATURE.search(line) and not line.startswith(("Get:", "Hit:", "Ign:"))]


def tail(output, count=8):
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-count:]
