# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The restart guard: may the host stage restart the Docker daemon, or change its package, now?

A reload (SIGHUP) keeps every container running. A restart, and installing or upgrading the Docker
package (its maintainer scripts restart the daemon), stops them unless live-restore is on; moving
the data root loses them either way (the daemon restarted on the new root does not know them).
Containers the collection owns carry one of OWN_LABELS (an engine, a front, a router); any other running container is someone
else's work, and the guard refuses to stop it unless the user allows it (host_docker_restart).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

OWN_LABELS = ("gpuserve.llm.service", "gpuserve.llm.front", "gpuserve.llm.router")

NONE, RELOAD, RESTART, DATA_ROOT, PACKAGE = "none", "reload", "restart", "data_root", "package"
NEEDS = (NONE, RELOAD, RESTART, DATA_ROOT, PACKAGE)
ALLOW, REFUSE = "allow", "refuse"

# What a daemon restart stops: a paused or restarting container is as live as a running one.
LIVE_STATES = ("running", "paused", "restarting")

WHAT = {
    RESTART: "restarting the Docker daemon",
    DATA_ROOT: "moving the Docker daemon's data root (a restart on the new root)",
    PACKAGE: "installing or upgrading the Docker package (its scripts restart the daemon)",
}


def name(container):
    names = container.get("Names") or []
    return names[0].lstrip("/") if names else (container.get("Id") or "?")[:12]


def is_live(container):
    """As Docker's API lists containers: State (running, ...), or without it, Status ("Up 3 hours")."""
    state = container.get("State")
    if state:
        return state in LIVE_STATES
    return str(container.get("Status", "")).startswith("Up")


def is_own(container):
    # A listing without labels (docker_host_info without verbose_output) cannot show ownership: not ours.
    return any(label in (container.get("Labels") or {}) for label in OWN_LABELS)


def release_line(version):
    """Docker's YY.MM release line of a package version: '5:27.3.1-1~debian.12~bookworm' -> '27.3',
    '20.10.24+dfsg1-1+deb12u1' -> '20.10'; None when it has none."""
    match = re.match(r"^(?:\d+:)?(\d+)\.(\d+)", str(version or ""))
    return "%s.%s" % match.groups() if match else None


def decide(containers, live_restore, need, policy=REFUSE, daemon="the Docker daemon", versions=None,
           live_restore_after=None, images=None):
    """Whether the change may go ahead. `containers`: the daemon's containers as its API lists them
    (Names, Labels, State); `live_restore`: the running daemon's (docker info LiveRestoreEnabled);
    `live_restore_after`: the configuration's the daemon restarts with, when it differs (None: the
    same) - both must be on, as a daemon starting without it kills the containers it finds;
    `need`: one of NEEDS; `policy`: host_docker_restart; `versions`: (installed, candidate) package
    versions for a package change, when known (live restore holds within one YY.MM line only);
    `images`: for a data-root move, the images the old root holds (their names): the daemon on the new
    root does not see them, so a move is refused while the old root holds any, as for a foreign container.

    Returns {go, stops: names that stop or are lost, foreign: those of them not the collection's,
    stranded: images left on the old root, finding: E_DOCKER_RESTART when refused, else None}."""
    if need not in NEEDS:
        raise ValueError("need is %r; allowed: %s" % (need, ", ".join(NEEDS)))
    if policy not in (ALLOW, REFUSE):
        raise ValueError("policy is %r; allowed: allow, refuse" % policy)
    result = {"go": True, "stops": [], "foreign": [], "stranded": [], "finding": None}
    if need in (NONE, RELOAD):
        return result

    # Docker's "Live restore" page: upgrades keep containers within patch releases (YY.MM.x) only.
    lines = [release_line(v) for v in (versions or ())]
    crosses = need == PACKAGE and len(lines) == 2 and None not in lines and lines[0] != lines[1]
    if need == DATA_ROOT:
        why = "live-restore does not carry containers to a new data root"
    elif crosses:
        why = "live-restore holds within one release line only, and this goes from %s to %s" % tuple(lines)
    elif live_restore and live_restore_after is not False:
        return result  # they keep running through the restart
    elif live_restore:
        why = "live-restore is off in the configuration the daemon restarts with"
    else:
        why = "live-restore is off"

    live = [c for c in containers or [] if is_live(c)]
    result["stops"] = sorted(name(c) for c in live)
    result["foreign"] = sorted(name(c) for c in live if not is_own(c))
    result["stranded"] = sorted(images or []) if need == DATA_ROOT else []
    if not (result["foreign"] or result["stranded"]) or policy == ALLOW:
        return result
    fix = ("stop them or set host_docker_restart: allow" if need == DATA_ROOT or crosses else
           "stop them, turn live-restore on first (a reload applies it), or set host_docker_restart: allow")
    what = []
    if result["foreign"]:
        what.append("would stop %d container(s) the collection does not own: %s (%s)"
                    % (len(result["foreign"]), ", ".join(result["foreign"]), why))
    if result["stranded"]:
        shown = result["stranded"][:5] + (["..."] if len(result["stranded"]) > 5 else [])
        what.append("would strand the %d image(s) the old data root holds: %s (the daemon on the new root does not "
                    "see them; move them yourself, or empty the old root)" % (len(result["stranded"]), ", ".join(shown)))
        fix = fix.replace("stop them", "stop or move them")
    result["go"] = False
    details = dict(containers=result["foreign"], need=need, live_restore=bool(live_restore))
    if result["stranded"]:
        details["images"] = result["stranded"]
    result["finding"] = finding(
        "E_DOCKER_RESTART", daemon, "%s at %s %s; %s" % (WHAT[need], daemon, " and ".join(what), fix), **details)
    return result
