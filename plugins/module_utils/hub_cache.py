# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A host's weights cache in the layout huggingface_hub writes (models--org--name/{blobs,snapshots,
refs}), whatever the source, and its verification stamps.

A file counts as present when its blob has the manifest's size. A stamp per commit
(.gpuserve-verified/models--org--name/<commit>.json) holds the manifest and each verified blob's
stat, so a rerun hashes nothing that did not change (hub_verify) and can go on while the hub
cannot be reached.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import time

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import read_json
from ansible_collections.gpuserve.llm.plugins.module_utils.hub_manifest import COMMIT_RE

STAMP_DIR = ".gpuserve-verified"
# A temporary file this old belongs to a transfer that died (a live one writes every second).
STALE_SECONDS = 600


def repo_folder(repo_id):
    return "models--" + repo_id.replace("/", "--")


def storage_dir(cache_dir, repo_id):
    return os.path.join(cache_dir, repo_folder(repo_id))


def blob_path(cache_dir, repo_id, etag):
    return os.path.join(storage_dir(cache_dir, repo_id), "blobs", etag)


def snapshot_dir(cache_dir, repo_id, commit):
    return os.path.join(storage_dir(cache_dir, repo_id), "snapshots", commit)


def stamp_path(cache_dir, repo_id, commit):
    return os.path.join(cache_dir, STAMP_DIR, repo_folder(repo_id), commit + ".json")


def stamped_manifest(cache_dir, repo_id, revision, allow_patterns, ignore_patterns):
    """The manifest a complete earlier run verified, for a rerun while the hub cannot be reached."""
    commit = revision
    if not COMMIT_RE.match(revision):
        try:
            with open(os.path.join(storage_dir(cache_dir, repo_id), "refs", revision)) as f:
                commit = f.read().strip()
        except (IOError, OSError):
            return None
    try:
        manifest = read_json(stamp_path(cache_dir, repo_id, commit))["manifest"]
    except (TypeError, KeyError):
        return None
    wanted = (list(allow_patterns or []), list(ignore_patterns or []))
    if (manifest.get("allow_patterns"), manifest.get("ignore_patterns")) != wanted:
        return None
    return manifest


def missing(cache_dir, manifest):
    """The manifest's files whose blob is absent or of another size."""
    out = []
    for f in manifest["files"]:
        path = blob_path(cache_dir, manifest["repo_id"], f["etag"])
        try:
            if os.path.getsize(path) == f["size"]:
                continue
        except OSError:
            pass
        out.append(f)
    return out


def free_bytes(path):
    """Free bytes on the filesystem that holds path (or its nearest existing parent)."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def mount_point(path):
    path = os.path.abspath(path)
    while not os.path.exists(path):
        path = os.path.dirname(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def link_snapshot(cache_dir, manifest):
    """snapshots/<commit>/<path> -> ../../blobs/<etag> for every file whose blob is there, and
    refs/<revision> when the revision is a name. Returns how many links or refs it wrote."""
    repo, commit = manifest["repo_id"], manifest["commit"]
    root = snapshot_dir(cache_dir, repo, commit)
    written = 0
    for f in manifest["files"]:
        blob = blob_path(cache_dir, repo, f["etag"])
        if not os.path.exists(blob):
            continue
        pointer = os.path.join(root, *f["path"].split("/"))
        target = os.path.relpath(blob, os.path.dirname(pointer))
        if os.path.islink(pointer) and os.readlink(pointer) == target:
            continue
        if not os.path.isdir(os.path.dirname(pointer)):
            os.makedirs(os.path.dirname(pointer))
        if os.path.lexists(pointer):
            os.unlink(pointer)
        os.symlink(target, pointer)
        written += 1
    if manifest["revision"] != commit:
        ref = os.path.join(storage_dir(cache_dir, repo), "refs", manifest["revision"])
        current = None
        if os.path.exists(ref):
            with open(ref) as f:
                current = f.read().strip()
        if current != commit:
            if not os.path.isdir(os.path.dirname(ref)):
                os.makedirs(os.path.dirname(ref))
            with open(ref, "w") as f:
                f.write(commit)
            written += 1
    return written


def links_needed(cache_dir, manifest):
    """Whether link_snapshot would write anything (check mode)."""
    repo, commit = manifest["repo_id"], manifest["commit"]
    root = snapshot_dir(cache_dir, repo, commit)
    for f in manifest["files"]:
        pointer = os.path.join(root, *f["path"].split("/"))
        target = os.path.relpath(blob_path(cache_dir, repo, f["etag"]), os.path.dirname(pointer))
        if not (os.path.islink(pointer) and os.readlink(pointer) == target):
            return True
    if manifest["revision"] != commit:
        ref = os.path.join(storage_dir(cache_dir, repo), "refs", manifest["revision"])
        if not os.path.exists(ref) or open(ref).read().strip() != commit:
            return True
    return False


def remove_bad(cache_dir, manifest, bad):
    """A blob that failed verification goes, with its snapshot link: the next run fetches it again."""
    root = snapshot_dir(cache_dir, manifest["repo_id"], manifest["commit"])
    for b in bad:
        for path in (b["blob"], os.path.join(root, *b["path"].split("/"))):
            if os.path.lexists(path):
                os.unlink(path)


def clean_stale(cache_dir, repo_id, now=None):
    """Temporary files of transfers that died (huggingface_hub names its own per process, so a
    killed run leaves one nobody resumes). rsync's partial files are kept: rsync resumes them."""
    blobs = os.path.join(storage_dir(cache_dir, repo_id), "blobs")
    now = now or time.time()
    removed = 0
    if os.path.isdir(blobs):
        for entry in os.scandir(blobs):
            if entry.name.endswith(".incomplete") and entry.is_file() and now - entry.stat().st_mtime > STALE_SECONDS:
                os.unlink(entry.path)
                removed += 1
    return removed


def bytes_on_disk(cache_dir, manifest, wanted):
    """Bytes of the wanted files on disk now: finished blobs plus the transfers' temporary files
    (huggingface_hub's <etag>.<id>.incomplete, rsync's partial-dir and .<etag>.XXXXXX)."""
    blobs = os.path.join(storage_dir(cache_dir, manifest["repo_id"]), "blobs")
    sizes = {}
    for folder in (blobs, os.path.join(blobs, ".rsync-partial")):
        if os.path.isdir(folder):
            for entry in os.scandir(folder):
                try:
                    if entry.is_file(follow_symlinks=False):
                        sizes[entry.name] = max(sizes.get(entry.name, 0), entry.stat().st_size)
                except OSError:
                    pass
    done = 0
    for f in wanted:
        best = sizes.get(f["etag"], 0)
        if best < f["size"]:
            best = max([best] + [s for n, s in sizes.items() if f["etag"] in n])
        done += min(best, f["size"])
    return done
