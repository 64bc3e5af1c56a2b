# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""/etc/docker/daemon.json by merge: the keys the collection needs are set, every other key stays.

Pure functions (the module does the file system): parse the file, merge the wanted keys, say per
changed key whether a running dockerd applies it on a reload (SIGHUP) or only on a restart, and
render the result.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import re

# What `nvidia-ctk runtime configure --runtime=docker` writes: the runtime's bare executable name
# (dockerd looks it up on PATH) and an empty "args" list, replacing any entry of that name whole.
# Read in NVIDIA/nvidia-container-toolkit: cmd/nvidia-ctk/runtime/configure/configure.go
# (defaultNVIDIARuntimeExecutable) and pkg/config/engine/docker/docker.go (Config.AddRuntime).
NVIDIA_RUNTIME_NAME = "nvidia"
NVIDIA_RUNTIME_PATH = "nvidia-container-runtime"

# The keys a running dockerd applies on a reload (SIGHUP, systemctl reload docker), from Docker's
# dockerd reference, "Configuration reload behavior" (docker/cli docs/reference/dockerd.md; the
# table's `authorization-plugin` is the file's `authorization-plugins`). Any other key, data-root
# and storage-driver among them, takes effect only when the daemon restarts.
RELOADABLE = frozenset([
    "debug", "labels", "live-restore", "max-concurrent-downloads", "max-concurrent-uploads",
    "max-download-attempts", "default-runtime", "runtimes", "authorization-plugins",
    "allow-nondistributable-artifacts", "insecure-registries", "registry-mirrors", "shutdown-timeout",
    "features",
])

# The keys this module sets through its own options, never through `settings`.
OWN_KEYS = ("runtimes", "live-restore", "data-root")

RELOAD = "reload"
RESTART = "restart"
NONE = "none"

_URL_CREDENTIALS = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/@\s]+@")


class DaemonJsonError(Exception):
    """The file cannot be read or is not what dockerd would accept; the message names what."""


def _no_duplicate_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            # dockerd would take one of the two silently; a rewrite would drop the other.
            raise DaemonJsonError("the key %s appears twice in one object" % json.dumps(key))
        seen[key] = value
    return seen


def parse(data):
    """The file's bytes as a dict. An empty file is {} (dockerd starts with one). Raises
    DaemonJsonError for anything else that is not one JSON object with unique keys."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DaemonJsonError("it is not UTF-8 text (%s)" % e)
    if not text.strip():
        return {}
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except ValueError as e:
        raise DaemonJsonError("it is not valid JSON: %s" % e)
    if not isinstance(value, dict):
        raise DaemonJsonError("it holds a JSON %s, not an object" % type(value).__name__.replace("list", "array"))
    return value


def read(path):
    """(the file's bytes or None when there is no file, its dict). Raises DaemonJsonError when the
    file is there but cannot be read or parsed."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except (IOError, OSError) as e:
        if not os.path.lexists(path):
            return None, {}
        raise DaemonJsonError("it cannot be read: %s" % (e.strerror or e))
    return data, parse(data)


def _same(a, b):
    # JSON equality with types: True is not 1 here, as it is not to dockerd.
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def applies(key):
    """"reload" when a running dockerd applies a change of `key` (a top-level key, or a dotted path
    below one) on SIGHUP, "restart" otherwise."""
    return RELOAD if key.split(".", 1)[0] in RELOADABLE else RESTART


def strongest(changes):
    """What applying all `changes` takes: "none", "reload" or "restart"."""
    needs = set(c["applies"] for c in changes)
    return RESTART if RESTART in needs else RELOAD if RELOAD in needs else NONE


def merge(current, nvidia_runtime=False, nvidia_runtime_path=NVIDIA_RUNTIME_PATH, live_restore=None,
          data_root="", settings=None):
    """(the new dict, the changes). `current` is not modified. The nvidia runtime is set as
    nvidia-ctk sets it; `live_restore` None and an empty `data_root` leave those keys as they are;
    `settings` replace other top-level keys whole. Each change is {key, before, after, applies};
    before or after is None when the key is absent on that side."""
    new = json.loads(json.dumps(current))  # a deep copy, in the file's key order
    changes = []

    def put(container, name, value, key):
        before = container.get(name)
        if name in container and _same(before, value):
            return
        container[name] = value
        changes.append({"key": key, "before": before, "after": value, "applies": applies(key)})

    for name, value in (settings or {}).items():
        if name in OWN_KEYS:
            raise ValueError("%s is set by its own option, not through settings" % name)
        put(new, name, value, name)
    if nvidia_runtime:
        runtimes = new.get("runtimes", {})
        if not isinstance(runtimes, dict):
            raise DaemonJsonError("its \"runtimes\" is a JSON %s, not an object" % type(runtimes).__name__)
        new["runtimes"] = runtimes
        put(runtimes, NVIDIA_RUNTIME_NAME, {"path": nvidia_runtime_path, "args": []},
            "runtimes." + NVIDIA_RUNTIME_NAME)
    if live_restore is not None:
        put(new, "live-restore", bool(live_restore), "live-restore")
    if data_root:
        root = os.path.normpath(data_root)
        if isinstance(new.get("data-root"), str) and os.path.normpath(new["data-root"]) == root:
            root = new["data-root"]  # the same folder written another way: no change
        put(new, "data-root", root, "data-root")
    return new, changes


def summary(changes):
    """What a plan of `changes` says: changed, the changes (credentials masked) and what applying them takes."""
    return dict(changed=bool(changes), changes=masked(changes), apply=strongest(changes))


def data_root_refused(data_root):
    """The E_CONFIG message for a data root that is not an absolute path; None for one that is (or none)."""
    if data_root and not os.path.isabs(data_root):
        return "data_root is %r; allowed: an absolute path" % data_root
    return None


def left_as_is(path, error):
    """The E_DAEMON_JSON message for a file that cannot be read, parsed or merged."""
    return "the Docker daemon's configuration %s is left as it is: %s" % (path, error)


def render(data):
    """The file's new text: four-space indents, as nvidia-ctk writes it, the keys in their order."""
    return json.dumps(data, indent=4, ensure_ascii=False) + "\n"


def masked(value):
    """`value` with the credentials of any URL in it replaced, for output (a proxy URL may hold them)."""
    if isinstance(value, dict):
        return dict((k, masked(v)) for k, v in value.items())
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, str):
        return _URL_CREDENTIALS.sub(r"\1xxxxx:xxxxx@", value)
    return value
