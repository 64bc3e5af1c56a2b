# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A checkpoint's manifest from the hub, and its missing files into a host's cache from one of three
sources: the hub through huggingface_hub, a mounted mirror folder, or a peer's rsync daemon.

huggingface_hub is imported where it is used: the folder and rsync sources do without it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import tempfile

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import replacing
from ansible_collections.gpuserve.llm.plugins.module_utils.hub_cache import blob_path, repo_folder, snapshot_dir
from ansible_collections.gpuserve.llm.plugins.module_utils.hub_manifest import (
    COMMIT_RE, DEFAULT_ENDPOINT, HubError, make_manifest, scrub)


def hub_error(exc, repo_id, revision, endpoint, token):
    """The catalogue's code for what huggingface_hub raised (classes looked up by name, so that
    this stays importable without the package)."""
    names = [c.__name__ for c in type(exc).__mro__]
    status = getattr(getattr(exc, "response", None), "status_code", None)
    where = endpoint or DEFAULT_ENDPOINT
    first = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__, [token])
    if "RevisionNotFoundError" in names:
        return HubError("E_CONFIG", "%s has no revision %r on %s: correct llm_model_revision (a commit hash, "
                                    "branch or tag)" % (repo_id, revision, where))
    if "GatedRepoError" in names or "RepositoryNotFoundError" in names or status in (401, 403):
        given = "the token given (llm_hf_token) was refused" if token else "no token was given (llm_hf_token is empty)"
        return HubError("E_AUTH", "%s on %s answered HTTP %s: %s; the repo is gated, private or misspelled (%s)"
                        % (repo_id, where, status or "401", given, first))
    return HubError("E_DOWNLOAD", "%s on %s: %s: %s" % (repo_id, where, type(exc).__name__, first))


def read_head(manifest, path, token, max_bytes=None):
    """The start of one file at the manifest's commit (all of it when max_bytes is None), read over the
    hub's resolve URL without touching the cache: what checkpoint.read needs before any weight is fetched."""
    import requests
    from urllib.parse import quote

    url = "%s/%s/resolve/%s/%s" % (manifest["endpoint"].rstrip("/"), manifest["repo_id"], manifest["commit"],
                                   quote(path))
    headers = {"Authorization": "Bearer " + token} if token else {}
    if max_bytes:
        headers["Range"] = "bytes=0-%d" % (max_bytes - 1)
    try:
        with requests.get(url, headers=headers, stream=True, timeout=60) as reply:
            reply.raise_for_status()
            data = b""
            for chunk in reply.iter_content(1 << 16):
                data += chunk
                if max_bytes and len(data) >= max_bytes:
                    break  # a server that ignores Range sends the whole file: read no further
            return data[:max_bytes] if max_bytes else data
    except Exception as e:  # pylint: disable=broad-except
        raise hub_error(e, manifest["repo_id"], manifest["commit"], manifest["endpoint"], token)


def _quiet_hub():
    """No progress bars on the module's stderr (the playbook prints its own lines); set before
    huggingface_hub is first imported, as it reads the variable then."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


def manifest_from_hub(repo_id, revision, endpoint, token, allow_patterns, ignore_patterns):
    """The hub's file list at the revision's commit, through huggingface_hub's API client."""
    _quiet_hub()
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile
    api = HfApi(endpoint=endpoint or None, token=token or False)
    try:
        commit = revision if COMMIT_RE.match(revision) else api.model_info(repo_id, revision=revision).sha
        entries = [(f.path, f.size, f.blob_id, f.lfs.sha256 if f.lfs is not None else None)
                   for f in api.list_repo_tree(repo_id, recursive=True, revision=commit) if isinstance(f, RepoFile)]
    except Exception as e:  # pylint: disable=broad-except
        raise hub_error(e, repo_id, revision, endpoint, token)
    return make_manifest(repo_id, revision, commit, endpoint, entries, allow_patterns, ignore_patterns)


def fetch_hub(cache_dir, manifest, token, endpoint, workers):
    """The missing files through huggingface_hub's snapshot_download (it skips what the cache holds
    and resumes a dropped connection with a Range request)."""
    _quiet_hub()
    from huggingface_hub import snapshot_download
    try:
        snapshot_download(manifest["repo_id"], revision=manifest["commit"], cache_dir=cache_dir,
                          allow_patterns=manifest["allow_patterns"] or None,
                          ignore_patterns=manifest["ignore_patterns"] or None,
                          token=token or False, endpoint=endpoint or None, max_workers=workers)
    except Exception as e:  # pylint: disable=broad-except
        raise hub_error(e, manifest["repo_id"], manifest["commit"], endpoint, token)


def fetch_folder(cache_dir, manifest, folder, wanted):
    """The missing files copied from a mirror folder: a plain checkout (<folder>/<path>) or a hub
    cache (<folder>/models--org--name/snapshots/<commit>/<path>)."""
    repo, commit = manifest["repo_id"], manifest["commit"]
    for f in wanted:
        candidates = [os.path.join(folder, *f["path"].split("/")),
                      os.path.join(snapshot_dir(folder, repo, commit), *f["path"].split("/"))]
        source = next((c for c in candidates if os.path.isfile(c)), None)
        if source is None:
            raise HubError("E_DOWNLOAD", "%s is not in the mirror folder %s (looked for %s)"
                           % (f["path"], folder, " and ".join(candidates)))
        try:
            # .incomplete, as huggingface_hub names its own: progress counts it, clean_stale removes it.
            with replacing(blob_path(cache_dir, repo, f["etag"]), suffix=".incomplete") as tmp:
                shutil.copyfile(source, tmp)
        except (IOError, OSError) as e:
            raise HubError("E_DOWNLOAD", "copying %s from %s: %s" % (f["path"], folder, e))


def rsync_command(url, cache_dir, list_file, timeout, bwlimit_kib=0):
    return (["rsync", "--times", "--partial-dir=.rsync-partial", "--timeout=%d" % timeout]
            + (["--bwlimit=%d" % bwlimit_kib] if bwlimit_kib else [])
            + ["--files-from=" + list_file, url.rstrip("/") + "/", cache_dir.rstrip("/") + "/"])


def fetch_rsync(cache_dir, manifest, url, password, wanted, run, timeout=300, bwlimit_kib=0):
    """The missing blobs pulled from a peer's rsync daemon (a partial file resumes on the next run).
    run: AnsibleModule.run_command, or anything that takes (argv, environ_update=) and returns
    (rc, stdout, stderr)."""
    repo = manifest["repo_id"]
    fd, list_file = tempfile.mkstemp(prefix=".gpuserve-rsync-", dir=cache_dir)
    with os.fdopen(fd, "w") as f:
        for w in wanted:
            f.write("%s/blobs/%s\n" % (repo_folder(repo), w["etag"]))
    try:
        rc, _out, err = run(rsync_command(url, cache_dir, list_file, timeout, bwlimit_kib),
                            environ_update={"RSYNC_PASSWORD": password or ""})
    finally:
        os.unlink(list_file)
    if rc != 0:
        tail = " / ".join(scrub(err, [password]).strip().splitlines()[-4:])
        raise HubError("E_DOWNLOAD", "rsync from %s exited %d: %s" % (url, rc, tail))
