# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A checkpoint's manifest: the hub's file list at a pinned commit (path, size, git blob id, LFS
sha256), read once per fleet and handed to every host; and the error every hub step raises.

A file's etag (its blob's name in the cache) is its LFS sha256, or its git blob id for a small file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import os
import re

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHARD_RE = re.compile(r"-\d{5}-of-\d{5}(?=\.gguf$)")
DEFAULT_ENDPOINT = "https://huggingface.co"


class HubError(Exception):
    """A failure with its code from the catalogue; the message names the repo or the file."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


def scrub(text, secrets):
    """The text with every secret replaced: error messages may echo what they were given."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "********")
    return text


def select(paths, allow_patterns, ignore_patterns):
    """The paths huggingface_hub's filter_repo_objects keeps (fnmatch; a pattern ending in / is a folder)."""
    def norm(patterns):
        return [p + "*" if p.endswith("/") else p for p in (patterns or [])]
    allow, ignore = norm(allow_patterns), norm(ignore_patterns)
    return [p for p in paths
            if (not allow or any(fnmatch.fnmatch(p, a) for a in allow))
            and not any(fnmatch.fnmatch(p, i) for i in ignore)]


def make_manifest(repo_id, revision, commit, endpoint, entries, allow_patterns, ignore_patterns):
    """entries: (path, size, blob_id, lfs_sha256 or None) as the hub's tree lists them."""
    by_path = dict((e[0], e) for e in entries)
    files = []
    for path in sorted(select(list(by_path), allow_patterns, ignore_patterns)):
        _p, size, blob_id, sha256 = by_path[path]
        files.append({"path": path, "size": int(size), "blob_id": blob_id, "sha256": sha256,
                      "etag": sha256 or blob_id})
    if not files:
        raise HubError("E_CONFIG", "no file of %s at %s matches the allow patterns %s (ignore %s): "
                       "correct weights_allow_patterns" % (repo_id, commit, allow_patterns or ["*"],
                                                           ignore_patterns or []))
    return {"repo_id": repo_id, "revision": revision, "commit": commit, "endpoint": endpoint or DEFAULT_ENDPOINT,
            "allow_patterns": list(allow_patterns or []), "ignore_patterns": list(ignore_patterns or []),
            "files": files, "bytes": sum(f["size"] for f in files)}


def gguf_model(manifest):
    """The GGUF the engine loads: the one model (its first shard) the patterns pick; mmproj files
    (vision projectors) are not models."""
    names = [f["path"] for f in manifest["files"] if f["path"].endswith(".gguf")
             and not os.path.basename(f["path"]).startswith("mmproj")]
    models = sorted(set(SHARD_RE.sub("", n) for n in names))
    if len(models) != 1:
        raise HubError("E_CONFIG", "%s at %s: the allow patterns pick %s GGUF models (%s); narrow "
                       "weights_allow_patterns to one, e.g. ['*Q4_K_M*.gguf']"
                       % (manifest["repo_id"], manifest["commit"], len(models) or "no", ", ".join(models) or "none"))
    return sorted(n for n in names if SHARD_RE.sub("", n) == models[0])[0]
