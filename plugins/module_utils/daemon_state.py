# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""What a Docker daemon says of itself through its Engine API (docker_daemon, host_read): whether it answers,
live restore, its data root and runtimes, its containers; and what of that differs from a configuration."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpuserve.llm.plugins.module_utils import docker_api, docker_restart


def api(docker_host, path):
    status, body = docker_api.get(docker_host, path)
    if status != 200:
        raise IOError("the Docker daemon at %s answered %d for %s" % (docker_host, status, path))
    return json.loads(body.decode("utf-8"))


def state(docker_host, images=False):
    """What the daemon says, or {answers: False} when it does not answer."""
    try:
        info = api(docker_host, "/info")
        listed = api(docker_host, "/containers/json?all=1")
        held = []
        if images:
            for image in api(docker_host, "/images/json"):
                tags = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"]
                held.append(tags[0] if tags else image.get("Id", "?")[7:19])
    except (IOError, OSError, ValueError) as e:
        return {"answers": False, "error": str(e), "containers": [], "listed": [], "images": []}
    return {
        "answers": True,
        "live_restore": bool(info.get("LiveRestoreEnabled")),
        "data_root": info.get("DockerRootDir", ""),
        "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        "version": info.get("ServerVersion", ""),
        "listed": listed,
        "containers": [{"name": docker_restart.name(c), "state": c.get("State") or c.get("Status", ""),
                        "own": docker_restart.is_own(c)} for c in listed],
        "images": held,
    }


def reported(now):
    """What the modules return of `now` (state's answer): whether it answers, live restore, data root, runtimes, the
    containers."""
    return dict(answers=now["answers"], live_restore=now.get("live_restore"), data_root=now.get("data_root"),
                runtimes=now.get("runtimes", []), containers=now["containers"])


def differs(now, expect):
    """What the daemon reports that is not what `expect` says (empty when it matches)."""
    if not now["answers"]:
        return ["it does not answer (%s)" % now.get("error", "")]
    out = []
    if expect.get("live_restore") is not None and now["live_restore"] != bool(expect["live_restore"]):
        out.append("live-restore is %s, not %s" % (now["live_restore"], bool(expect["live_restore"])))
    missing = [r for r in expect.get("runtimes") or [] if r not in now["runtimes"]]
    if missing:
        out.append("the runtimes %s are missing (it has %s)" % (", ".join(missing), ", ".join(now["runtimes"])))
    root = expect.get("data_root")
    if root and os.path.normpath(now["data_root"]) != os.path.normpath(root):
        out.append("its data root is %s, not %s" % (now["data_root"], root))
    return out
