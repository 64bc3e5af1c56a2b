# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Each filter is documented in <its name>.yml beside this file (ansible-doc -t filter gpuserve.llm.<name>).

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import CODES, ERROR, WARNING, finding

SEVERITY_ORDER = {ERROR: 0, WARNING: 1}


def make_finding(code, subject, message):
    if code not in CODES:
        raise AnsibleFilterError("unknown finding code %s" % code)
    return finding(code, subject, message)


def finding_lines(findings, host=None):
    """One readable line per finding, errors first: CODE [severity] host subject: message. Fix: ..."""
    lines = []
    for f in sorted(findings or [], key=lambda f: (SEVERITY_ORDER.get(f["severity"], 2), f["code"], f["subject"])):
        where = "%s %s" % (host, f["subject"]) if host else f["subject"]
        lines.append("%s [%s] %s: %s. Fix: %s" % (f["code"], f["severity"], where, f["message"], f["fix"]))
    return lines


def preflight_status(entry):
    """A host's status in the fleet report: ERROR with an error finding; FAILED when it stopped
    before its checks finished for any other reason (a task failed, the host went unreachable);
    NOT RUN when it never got as far as validation (or was left out by --limit); else WARN or OK."""
    severities = {f["severity"] for f in entry.get("findings", [])}
    if ERROR in severities:
        return "ERROR"
    if not entry.get("reached", True):
        return "NOT RUN"
    if not entry.get("checked", True):
        return "FAILED"
    return "WARN" if WARNING in severities else "OK"


def findings_table(report):
    """The fleet table: one row per host with its status, its weights (dummy weights are burn-in
    weights, said wherever results are shown) and codes (counts when a code repeats)."""
    rows = [("host", "status", "weights", "findings")]
    for host in sorted(report):
        entry = report[host]
        counts = {}
        for f in entry.get("findings", []):
            counts[f["code"]] = counts.get(f["code"], 0) + 1
        codes = ", ".join("%s%s" % (c, " x%d" % n if n > 1 else "") for c, n in sorted(
            counts.items(), key=lambda kv: (not kv[0].startswith("E_"), kv[0])))
        weights = {"dummy": "dummy weights", "hub": "hub"}.get(entry.get("weights"), "-")
        rows.append((host, entry.get("status") or preflight_status(entry), weights, codes or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    out = ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


def docker_findings(result, docker_host, needs_gpu_runtime, checked=True):
    """E_DOCKER when the daemon did not answer; E_NVIDIA_RUNTIME when a GPU profile's daemon has no nvidia runtime."""
    if not checked:
        return []  # no collection virtualenv on the host: E_VENV says so already
    info = (result or {}).get("host_info")
    if not info:
        error = (result or {}).get("msg") or "no answer"
        if "permission denied" in error.lower():
            return []  # the daemon is there; the socket refuses this user: E_DOCKER_GROUP says so
        return [finding("E_DOCKER", docker_host, "the Docker daemon at %s does not answer: %s" % (docker_host, error))]
    runtimes = sorted((info.get("Runtimes") or {}).keys())
    if needs_gpu_runtime and "nvidia" not in runtimes:
        return [finding("E_NVIDIA_RUNTIME", docker_host, "the Docker daemon at %s has no nvidia runtime (runtimes: %s)"
                        % (docker_host, ", ".join(runtimes) or "none"), runtimes=runtimes)]
    return []


# The labels the image stage gives the engine images it makes: llama.cpp from Debian's packages, a pulled
# image derived with the patch series, an image built at a commit.
ENGINE_IMAGE_LABELS = ("gpuserve.llm.llama-cpp-tools", "gpuserve.llm.base", "gpuserve.llm.commit")


def engine_image_bytes(result, image=""):
    """The bytes of the engine image the host holds already, for the disk budget at Docker's data root: the
    largest of the engine images the collection made (ENGINE_IMAGE_LABELS; the front's and the router's are not
    engines) and the one `image` (llm_image) names; 0 when there is none, or the daemon did not answer. Asked of
    the daemon (docker_host_info's verbose image list), not walked: a data root holds hundreds of thousands of
    files, and other images are no room for this one."""
    sizes = [0]
    for listed in (result or {}).get("images") or []:
        labels = listed.get("Labels") or {}
        names = (listed.get("RepoTags") or []) + (listed.get("RepoDigests") or [])
        if any(key in labels for key in ENGINE_IMAGE_LABELS) or (image and image in names):
            sizes.append(int(listed.get("Size") or 0))
    return max(sizes)


def p2p_matrix(pairs):
    """Peer access as a grid, rows = from, columns = to: OK, NO (not OK), ? (NVML could not answer)."""
    mark = {"ok": "OK", "not_ok": "NO", "unknown": "?"}
    cells = dict(((p["from"], p["to"]), mark.get(p["peer_access"], "?")) for p in pairs or [])
    gpus = sorted(set(pair[0] for pair in cells) | set(pair[1] for pair in cells))
    lines = ["%-8s " % "from\\to" + " ".join("%-6s" % ("GPU%d" % g) for g in gpus)]
    for a in gpus:
        lines.append("%-8s " % ("GPU%d" % a) + " ".join("%-6s" % ("X" if a == b else cells.get((a, b), "-")) for b in gpus))
    return [line.rstrip() for line in lines]


class FilterModule(object):
    def filters(self):
        return {
            "finding": make_finding,
            "finding_lines": finding_lines,
            "findings_table": findings_table,
            "preflight_status": preflight_status,
            "p2p_matrix": p2p_matrix,
            "docker_findings": docker_findings,
            "engine_image_bytes": engine_image_bytes,
        }
