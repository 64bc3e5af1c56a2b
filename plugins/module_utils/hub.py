# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Checkpoints from a Hugging Face hub (or a hub-compatible mirror) into the hub's own cache layout.

The manifest is the hub's file list at a pinned commit (path, size, git blob id, LFS sha256), read
once per fleet and handed to every host. Each host's cache is the layout huggingface_hub writes
(models--org--name/{blobs,snapshots,refs}), whatever the source: the hub through huggingface_hub,
a mounted folder, or a peer over rsync. A file counts as present when its blob has the manifest's
size; it counts as verified when its sha256 (LFS) or git blob sha1 (small files) matches. A stamp
per commit keeps each verified blob's stat, so a rerun hashes nothing that did not change.

huggingface_hub is imported where it is used: the folder and rsync sources do without it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import time

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
SHARD_RE = re.compile(r"-\d{5}-of-\d{5}(?=\.gguf$)")
DEFAULT_ENDPOINT = "https://huggingface.co"
STAMP_DIR = ".gpuserve-verified"
CHUNK = 8 * 1024 * 1024
# A temporary file this old belongs to a transfer that died (a live one writes every second).
STALE_SECONDS = 600


class HubError(Exception):
    """A failure with its code from the catalogue; the message names the repo or the file."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


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
        with open(stamp_path(cache_dir, repo_id, commit)) as f:
            manifest = json.load(f)["manifest"]
    except (IOError, OSError, ValueError, KeyError):
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
    try:
        with open(stamp_file) as f:
            known = json.load(f).get("blobs", {})
    except (IOError, OSError, ValueError):
        known = {}
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
    write_json(stamp_file, {"manifest": manifest, "blobs": good})
    return len(todo), sum(item[2][0] for item in todo), bad


def remove_bad(cache_dir, manifest, bad):
    """A blob that failed verification goes, with its snapshot link: the next run fetches it again."""
    root = snapshot_dir(cache_dir, manifest["repo_id"], manifest["commit"])
    for b in bad:
        for path in (b["blob"], os.path.join(root, *b["path"].split("/"))):
            if os.path.lexists(path):
                os.unlink(path)


def write_json(path, data):
    folder = os.path.dirname(path)
    if not os.path.isdir(folder):
        os.makedirs(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f)
    os.rename(tmp, path)


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


class Progress(object):
    """Writes {phase, done, total, ...} to a file every few seconds for the progress lines the
    playbook prints while the module runs in the background."""

    def __init__(self, path, interval=1.0):
        self.path = path
        self.interval = interval
        self.lock = threading.Lock()
        self.state = {"phase": "starting", "done": 0, "total": 0, "started": time.time()}
        self.measure = None
        self._stop = threading.Event()
        self._thread = None

    def phase(self, name, total, measure=None):
        with self.lock:
            self.state.update(phase=name, done=0, total=total, phase_started=time.time())
            self.measure = measure
        self.write()

    def add(self, n):
        with self.lock:
            self.state["done"] += n

    def write(self):
        if not self.path:
            return
        with self.lock:
            if self.measure is not None:
                try:
                    self.state["done"] = self.measure()
                except OSError:
                    pass
            self.state["updated"] = time.time()
            data = dict(self.state)
        try:
            write_json(self.path, data)
        except (IOError, OSError):
            pass

    def _run(self):
        while not self._stop.wait(self.interval):
            self.write()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run)
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.write()


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def progress_line(state, now=None):
    """One line for a host: what it is doing, bytes done of total, the rate since the phase began."""
    if not state:
        return "starting"
    now = now or time.time()
    if "line" in state:  # a job that counts steps, not bytes (verify, bench)
        return "%s, %d s" % (state["line"], int(now - state.get("started", now)))
    done, total = state.get("done", 0), state.get("total", 0)
    elapsed = max(now - state.get("phase_started", state.get("started", now)), 1e-6)
    pct = (100.0 * done / total) if total else 100.0
    return "%s: %s of %s (%d%%), %s/s, %d s" % (
        state.get("phase", "working"), human(done), human(total), pct, human(done / elapsed),
        int(now - state.get("started", now)))


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
        blob = blob_path(cache_dir, repo, f["etag"])
        if not os.path.isdir(os.path.dirname(blob)):
            os.makedirs(os.path.dirname(blob))
        tmp = "%s.%d.incomplete" % (blob, os.getpid())
        try:
            shutil.copyfile(source, tmp)
            os.rename(tmp, blob)
        except (IOError, OSError) as e:
            raise HubError("E_DOWNLOAD", "copying %s from %s: %s" % (f["path"], folder, e))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


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
