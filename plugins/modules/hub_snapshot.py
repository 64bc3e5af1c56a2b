#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hub_snapshot
short_description: A checkpoint at a pinned commit in the host's Hugging Face cache, fetched once and verified
version_added: "0.1.0"
description:
  - O(state=manifest) reads the repo's file list at the revision's commit from the hub (or a hub-compatible
    mirror, O(endpoint)) through huggingface_hub and says what this host's cache lacks. Nothing is written.
  - O(state=present) fetches what the cache lacks from O(source) - the hub (huggingface_hub's C(snapshot_download)),
    a mirror folder, or a peer's rsync daemon - after checking the filesystem's free space, then verifies every file
    against the manifest (size, and sha256 for LFS files or git's blob sha1 for small ones). A file that fails is
    removed so that the next run fetches it again, and the module fails with E_CHECKSUM naming it.
  - The cache has the layout huggingface_hub writes (C(models--org--name/blobs), C(snapshots/<commit>), C(refs)), so
    engines and C(huggingface_hub) read it as their own. A stamp per commit keeps each verified file's stat, so a rerun
    hashes only what changed and reports no change.
  - With O(progress_file), writes the phase and the bytes done and due every few seconds, for the playbook's progress
    lines while the module runs in the background.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Reads the manifest and the cache, says how many bytes and files would be fetched; writes nothing.
  diff_mode:
    support: none
options:
  repo_id:
    description: The model repo, C(org/name).
    type: str
    required: true
  revision:
    description: A commit hash (pinned), branch or tag.
    type: str
    default: main
  allow_patterns:
    description: Only files matching one of these (fnmatch, as huggingface_hub matches them); empty = all.
    type: list
    elements: str
    default: []
  ignore_patterns:
    description: Files matching one of these are left out.
    type: list
    elements: str
    default: []
  cache_dir:
    description: The host's Hugging Face cache (the hub's layout).
    type: path
    required: true
  endpoint:
    description: A hub-compatible endpoint (what C(HF_ENDPOINT) names); empty = huggingface.co.
    type: str
    default: ""
  token:
    description: The hub token; empty = none.
    type: str
    default: ""
  manifest:
    description: The manifest another host read (RV(manifest)); given, the hub is not asked.
    type: dict
  state:
    description: C(manifest) reads and reports; C(present) fetches and verifies.
    type: str
    choices: [manifest, present]
    default: present
  source:
    description: Where missing files come from.
    type: str
    choices: [hub, folder, rsync]
    default: hub
  source_path:
    description: The mirror folder (O(source=folder)) or the peer's rsync URL (O(source=rsync)).
    type: str
    default: ""
  rsync_password:
    description: The peer rsync daemon's password.
    type: str
    default: ""
  rsync_bwlimit_kib:
    description: The most KiB a second an rsync copy takes from the LAN; 0 = no limit.
    type: int
    default: 0
  reserve_bytes:
    description: Free bytes the filesystem must keep after the download.
    type: int
    default: 1073741824
  workers:
    description: Files fetched and hashed at once.
    type: int
    default: 8
  progress_file:
    description: Where to write progress (JSON) while running; empty = nowhere.
    type: path
  format:
    description: C(gguf) also returns the one GGUF model file the patterns pick (E_CONFIG when they pick several).
    type: str
    choices: [hf, gguf]
    default: hf
  serve:
    description:
      - What the checkpoint must serve - C(llm_vision), C(llm_drafter), C(llm_engine), C(llm_gpus),
        C(llm_expert_parallel), C(autotune_moe). With O(state=manifest) read from the hub and vision on,
        C(llm_drafter=mtp), a GPU engine on several GPUs or a MoE tune, the checkpoint's config.json (or its GGUF
        header, with O(format=gguf)) is read first, without the cache, and a setting it cannot honour (vision with a
        text model, MTP drafting without MTP layers, a GPU count its heads or experts do not divide, experts split
        into parts of their weight blocks without expert parallelism, expert parallelism on vLLM for a dense model,
        a MoE tune the tuner could not make) fails with E_UNSUPPORTED before any weight is fetched.
    type: dict
    default: {}
"""

EXAMPLES = r"""
- name: The file list at the pinned commit, read once
  gpuserve.llm.hub_snapshot:
    state: manifest
    repo_id: zai-org/GLM-4.6V-FP8
    revision: 8f3a0c4d0e5b7a9c1d2e3f405162738495a6b7c8
    allow_patterns: ["*.json", "*.safetensors", "*.jinja", "*.txt"]
    cache_dir: /var/lib/gpuserve/hf
    token: "{{ llm_hf_token }}"
  register: manifest

- name: Copy it from the first host's rsync daemon and verify
  gpuserve.llm.hub_snapshot:
    repo_id: zai-org/GLM-4.6V-FP8
    cache_dir: /var/lib/gpuserve/hf
    manifest: "{{ manifest.manifest }}"
    source: rsync
    source_path: rsync://gpuserve@10.0.0.11:8730/gpuserve-hf
    rsync_password: "{{ weights_rsync_password }}"
"""

RETURN = r"""
manifest:
  description: The repo, revision, commit, endpoint, patterns, files (path, size, blob_id, sha256, etag) and bytes.
  returned: success
  type: dict
commit:
  description: The commit the revision names.
  returned: success
  type: str
path:
  description: The snapshot folder (what an engine loads).
  returned: success
  type: str
model_file:
  description: The GGUF model file (its first shard) in the snapshot folder.
  returned: O(format=gguf)
  type: str
capabilities:
  description: What the checkpoint serves - vision (bool), mtp_layers (int, or null when its header did not say),
    shape (from config.json - the heads, KV heads, widths and vision heads tensor parallelism splits) and source
    (config.json or GGUF header).
  returned: when O(serve) asked for vision, MTP drafting or several GPUs and the manifest came from the hub
  type: dict
bytes_total:
  description: Bytes of the files the patterns pick.
  returned: success
  type: int
bytes_missing:
  description: Bytes the cache lacked when the module started (what was fetched, or would be in check mode).
  returned: success
  type: int
files_missing:
  description: Files the cache lacked when the module started.
  returned: success
  type: int
free_bytes:
  description: Free bytes on the cache's filesystem when the module started.
  returned: success
  type: int
hashed_files:
  description: Files hashed this run (a file verified before and unchanged is not hashed again).
  returned: O(state=present)
  type: int
manifest_from:
  description: Where the manifest came from - given, the hub (endpoint), or the stamp of a verified earlier run.
  returned: success
  type: str
finding:
  description: On failure, the finding (E_AUTH, E_DOWNLOAD, E_CHECKSUM, E_DISK, E_CONFIG, E_VENV).
  returned: failure
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuserve.llm.plugins.module_utils import checkpoint, hub_cache, hub_fetch, hub_verify
from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail
from ansible_collections.gpuserve.llm.plugins.module_utils.hub_manifest import (
    DEFAULT_ENDPOINT, HubError, gguf_model, scrub)
from ansible_collections.gpuserve.llm.plugins.module_utils.progress import Progress, human


def read_manifest(module, p):
    if p["manifest"]:
        return p["manifest"], "given"
    try:
        return (hub_fetch.manifest_from_hub(p["repo_id"], p["revision"], p["endpoint"], p["token"],
                                            p["allow_patterns"], p["ignore_patterns"]),
                p["endpoint"] or DEFAULT_ENDPOINT)
    except ImportError as e:
        fail(module, "E_VENV", p["repo_id"], "huggingface_hub is missing from the host's virtualenv (%s); "
             "it is in requirements-host.txt" % e)
    except HubError as e:
        if e.code == "E_DOWNLOAD":
            stamped = hub_cache.stamped_manifest(p["cache_dir"], p["repo_id"], p["revision"], p["allow_patterns"],
                                                 p["ignore_patterns"])
            if stamped is not None:
                module.warn("the hub could not be reached (%s); using the file list this host verified before" % e)
                return stamped, "stamp"
        fail(module, e.code, p["repo_id"], e.message)


def check_capabilities(module, p, manifest, result):
    """What the checkpoint can serve, from its config.json or GGUF header before any weight is fetched;
    E_UNSUPPORTED for a setting in p["serve"] it cannot honour."""
    gguf_file = gguf_model(manifest) if p["format"] == "gguf" else None
    try:
        caps = checkpoint.read(lambda path, max_bytes: hub_fetch.read_head(manifest, path, p["token"], max_bytes),
                               manifest, gguf_file)
    except ImportError as e:
        fail(module, "E_VENV", p["repo_id"], "requests is missing from the host's virtualenv (%s)" % e)
    except HubError as e:
        fail(module, e.code, p["repo_id"], scrub(e.message, [p["token"]]))
    except ValueError as e:
        module.warn("%s: the checkpoint could not be read for what it serves (%s); not checked" % (p["repo_id"], e))
        return
    result["capabilities"] = caps
    refused = checkpoint.refusals(p["serve"], caps, manifest["repo_id"], manifest["commit"]) if caps else []
    if refused:
        fail(module, "E_UNSUPPORTED", refused[0]["subject"], "; ".join(f["message"] for f in refused),
             findings=refused, **result)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            repo_id=dict(type="str", required=True),
            revision=dict(type="str", default="main"),
            allow_patterns=dict(type="list", elements="str", default=[]),
            ignore_patterns=dict(type="list", elements="str", default=[]),
            cache_dir=dict(type="path", required=True),
            endpoint=dict(type="str", default=""),
            token=dict(type="str", default="", no_log=True),
            manifest=dict(type="dict"),
            state=dict(type="str", default="present", choices=["manifest", "present"]),
            source=dict(type="str", default="hub", choices=["hub", "folder", "rsync"]),
            source_path=dict(type="str", default=""),
            rsync_password=dict(type="str", default="", no_log=True),
            rsync_bwlimit_kib=dict(type="int", default=0),
            reserve_bytes=dict(type="int", default=1 << 30),
            workers=dict(type="int", default=8),
            progress_file=dict(type="path"),
            format=dict(type="str", default="hf", choices=["hf", "gguf"]),
            serve=dict(type="dict", default={}),
        ),
        required_if=[("source", "folder", ["source_path"]), ("source", "rsync", ["source_path"])],
        supports_check_mode=True,
    )
    p = module.params
    cache = p["cache_dir"]
    manifest, manifest_from = read_manifest(module, p)
    repo, commit = manifest["repo_id"], manifest["commit"]
    subject = "%s@%s" % (repo, commit[:12])
    lacking = hub_cache.missing(cache, manifest)
    due = sum(f["size"] for f in lacking)
    free = hub_cache.free_bytes(cache)
    result = dict(changed=False, manifest=manifest, manifest_from=manifest_from, commit=commit,
                  path=hub_cache.snapshot_dir(cache, repo, commit), bytes_total=manifest["bytes"], bytes_missing=due,
                  files_missing=len(lacking), free_bytes=free)
    if p["format"] == "gguf":
        try:
            result["model_file"] = os.path.join(result["path"], gguf_model(manifest))
        except HubError as e:
            fail(module, e.code, subject, e.message)
    if p["state"] == "manifest":
        if manifest_from != "given" and checkpoint.needed(p["serve"]):
            check_capabilities(module, p, manifest, result)
        module.exit_json(**result)

    if due and due + p["reserve_bytes"] > free:
        fail(module, "E_DISK", hub_cache.mount_point(cache),
             "%s needs %s more in %s, the filesystem %s has %s free (%s kept in reserve)"
             % (subject, human(due), cache, hub_cache.mount_point(cache), human(free), human(p["reserve_bytes"])),
             details=dict(needed_bytes=due, free_bytes=free))
    result["changed"] = bool(lacking) or hub_cache.links_needed(cache, manifest)
    if module.check_mode:
        module.exit_json(**result)

    try:
        if not os.path.isdir(cache):
            os.makedirs(cache, 0o755)
        with Progress(p["progress_file"]) as progress:
            hub_cache.clean_stale(cache, repo)
            if lacking:
                source = {"hub": "from %s" % (p["endpoint"] or DEFAULT_ENDPOINT), "folder": "from " + p["source_path"],
                          "rsync": "from " + p["source_path"]}[p["source"]]
                progress.phase("fetching %s %s" % (repo, source), due,
                               lambda: hub_cache.bytes_on_disk(cache, manifest, lacking))
                if p["source"] == "hub":
                    hub_fetch.fetch_hub(cache, manifest, p["token"], p["endpoint"], p["workers"])
                elif p["source"] == "folder":
                    hub_fetch.fetch_folder(cache, manifest, p["source_path"], lacking)
                else:
                    if module.get_bin_path("rsync") is None:
                        raise HubError("E_DOWNLOAD", "rsync is not installed on the host: install it (the "
                                                     "package rsync) to copy from " + p["source_path"])
                    hub_fetch.fetch_rsync(cache, manifest, p["source_path"], p["rsync_password"], lacking,
                                          module.run_command, bwlimit_kib=p["rsync_bwlimit_kib"])
            hub_cache.link_snapshot(cache, manifest)
            still = hub_cache.missing(cache, manifest)
            if still:
                raise HubError("E_DOWNLOAD", "%s: %d file(s) still missing after the transfer: %s" % (
                    subject, len(still), ", ".join(f["path"] for f in still[:5])))
            progress.phase("verifying " + repo, manifest["bytes"])
            hashed, hashed_bytes, bad = hub_verify.verify(cache, manifest, progress, p["workers"])
    except ImportError as e:
        fail(module, "E_VENV", repo, "huggingface_hub is missing from the host's virtualenv (%s)" % e)
    except HubError as e:
        fail(module, e.code, subject, scrub(e.message, [p["token"], p["rsync_password"]]))
    except (IOError, OSError) as e:
        fail(module, "E_DOWNLOAD", subject, "writing the cache %s: %s" % (cache, e))
    result.update(hashed_files=hashed, hashed_bytes=hashed_bytes)
    if bad:
        hub_cache.remove_bad(cache, manifest, bad)
        fail(module, "E_CHECKSUM", bad[0]["path"],
             "%s: %s; the file%s removed from the cache, the next run fetches %s again (check the source if it repeats)"
             % (subject, "; ".join("%s has %s %s, the manifest says %s (%d of %d bytes)"
                                   % (b["path"], b["kind"], b["found"][:16], b["expected"][:16], b["size"],
                                      b["expected_size"]) for b in bad),
                " was" if len(bad) == 1 else "s were", "it" if len(bad) == 1 else "them"),
             details=dict(files=[b["path"] for b in bad]))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
