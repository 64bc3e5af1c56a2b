# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Verification of a weights cache against its manifest: a file is verified when its sha256 (LFS)
or git blob sha1 (small files) matches; the stamp keeps each verified blob's stat, so a rerun
hashes only what changed."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import read_json, write_json
from ansible_collections.gpuserve.llm.plugins.module_utils.hub_cache import blob_path, stamp_path

CHUNK = 8 * 1024 * 1024


def digest(path, entry, progress=None):
    """The file's hash in the manifest's terms: sha256 for LFS files, git's blob sha1 otherwise."""
    if entry["sha256"]:
        h = hashlib.sha256()
    else:
        h = hashlib.sha1()
        h.update(b"blob %d\0" % os.path.getsize(path))
    with open(path, "rb") as f:
        while True:
            chunk = f.read(CHUNK)
            if not chunk:
                break
            h.update(chunk)
            if progress is not None:
                progress.add(len(chunk))
    return h.hexdigest()


def _stat_key(path):
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def verify(cache_dir, manifest, progress=None, workers=4):
    """Hash every blob that changed since the last verification; write the stamp for the good ones.
    Returns (files hashed, bytes hashed, bad files as dicts naming path, blob, expected, found)."""
    from concurrent.futures import ThreadPoolExecutor
    repo = manifest["repo_id"]
    stamp_file = stamp_path(cache_dir, repo, manifest["commit"])
    known = (read_json(stamp_file) or {}).get("blobs", {})
    todo, good = [], {}
    for f in manifest["files"]:
        path = blob_path(cache_dir, repo, f["etag"])
        key = _stat_key(path)
        if known.get(f["etag"]) == key:
            good[f["etag"]] = key
        else:
            todo.append((f, path, key))

    def check(item):
        f, path, key = item
        found = digest(path, f, progress)
        expected = f["sha256"] or f["blob_id"]
        size = os.path.getsize(path)
        if size != f["size"] or found != expected:
            return {"path": f["path"], "blob": path, "expected": expected, "found": found,
                    "size": size, "expected_size": f["size"], "kind": "sha256" if f["sha256"] else "git blob sha1"}
        good[f["etag"]] = key
        return None

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        bad = [b for b in pool.map(check, todo) if b]
    write_json(stamp_file, {"manifest": manifest, "blobs": good}, mode=None)
    return len(todo), sum(item[2][0] for item in todo), bad
