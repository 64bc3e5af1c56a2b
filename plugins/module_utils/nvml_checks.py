# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""GPU preflight checks through NVML (nvidia-ml-py), as findings and facts.

`run_checks(nvml, params)` takes the imported `pynvml` module, so the same code reads a real
driver or the test double that replays recorded readings. Every NVML call goes through
`_call`, which turns any exception (NVMLError, a ctypes ArgumentError from the binding, a
function the installed binding lacks) into an error string: no NVML call becomes a traceback.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

MIB = 1024 * 1024

# Peer-access capability indices of nvmlGpuP2PCapsIndex_t. Passed as plain ints: in
# nvidia-ml-py 13.610.43 NVML_P2P_CAPS_INDEX_READ is the tuple (0,) (a stray comma),
# which ctypes cannot convert.
P2P_CAPS = (("read", 0), ("write", 1), ("nvlink", 2), ("atomics", 3), ("pci", 4))
# Peer access for CUDA means reads and writes both ways; the rest are recorded as facts.
P2P_REQUIRED = ("read", "write")
P2P_STATUS = {
    0: "OK",
    1: "CHIPSET_NOT_SUPPORTED",
    2: "GPU_NOT_SUPPORTED",
    3: "IOH_TOPOLOGY_NOT_SUPPORTED",
    4: "DISABLED_BY_REGKEY",
    5: "NOT_SUPPORTED",
    6: "UNKNOWN",
}
TOPOLOGY = {0: "INTERNAL", 10: "SINGLE", 20: "MULTIPLE", 30: "HOSTBRIDGE", 40: "NODE", 50: "SYSTEM"}

# NVML_ERROR_LIBRARY_NOT_FOUND: what nvidia-ml-py's nvmlInit raises when libnvidia-ml.so.1 cannot be loaded.
NVML_ERROR_LIBRARY_NOT_FOUND = 12

MEMORY_ERROR_TYPE_UNCORRECTED = 1
VOLATILE_ECC = 0
RETIRE_CAUSE_SINGLE_BIT = 0
RETIRE_CAUSE_DOUBLE_BIT = 1


class _Calls:
    """Guarded NVML calls; remembers which ones could not answer."""

    def __init__(self, nvml):
        self.nvml = nvml
        self.unanswered = []
        self.last_exception = None

    def __call__(self, name, *args, **kwargs):
        fn = getattr(self.nvml, name, None)
        try:
            if fn is None:
                raise AttributeError("the installed nvidia-ml-py has no %s" % name)
            return fn(*args), None
        except Exception as e:  # NVMLError, ctypes.ArgumentError, anything a binding raises
            self.last_exception = e
            err = "%s: %s" % (type(e).__name__, e)
            if kwargs.get("record", True):
                self.unanswered.append({"call": name, "error": err})
            return None, err

    def value(self, name, *args):
        """Only the answer (None when NVML could not give one); the failure is still recorded."""
        return self(name, *args)[0]


def _text(value):
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def cuda_version_int(text):
    """'12.8' -> 12080, the form nvmlSystemGetCudaDriverVersion returns."""
    major, dummy, minor = str(text).partition(".")
    return int(major) * 1000 + int(minor or 0) * 10


def cuda_version_text(value):
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def os_release(paths=("/etc/os-release", "/usr/lib/os-release")):
    """The first os-release file's fields (ID, VERSION_ID, ID_LIKE, PRETTY_NAME, ...); {} without one."""
    for path in paths:
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except (IOError, OSError):
            continue
        fields = {}
        for line in lines:
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                fields[key.strip()] = value.strip().strip("'\"")
        return fields
    return {}


def driver_package(release):
    """(the distribution's driver package, how to install it) for an os-release dict. The collection
    never installs a driver: this only names what the admin installs."""
    ids = [release.get("ID", "")] + release.get("ID_LIKE", "").split()
    name = release.get("PRETTY_NAME") or " ".join(x for x in (release.get("ID"), release.get("VERSION_ID")) if x)
    if "ubuntu" in ids:
        return ("nvidia-driver-<version>-server-open",
                "install %s's nvidia-driver-<version>-server-open (sudo ubuntu-drivers install --gpgpu picks the "
                "version) and reboot" % (name or "Ubuntu"))
    if "debian" in ids:
        return ("nvidia-driver",
                "install %s's nvidia-driver from the non-free component (add non-free and non-free-firmware to the "
                "apt sources; apt install linux-headers-amd64 nvidia-driver firmware-misc-nonfree) and reboot, or a "
                "newer driver from NVIDIA's CUDA repository when the image's CUDA needs one" % (name or "Debian"))
    return ("the NVIDIA driver", "install the NVIDIA driver for %s (the distribution's packages or NVIDIA's) and "
            "reboot" % (name or "this distribution"))


def _init_finding(error, exception, dev_root, release):
    """nvmlInit failed: E_NO_DRIVER when there is no driver at all (no /dev/nvidiactl and no loadable
    libnvidia-ml), E_NVML when some of it is there but does not answer."""
    library_missing = getattr(exception, "value", None) == NVML_ERROR_LIBRARY_NOT_FOUND
    control = os.path.join(dev_root, "nvidiactl")
    has_control = os.path.exists(control)
    if library_missing and not has_control:
        release = release or {}
        package, how = driver_package(release)
        distribution = " ".join(x for x in (release.get("ID"), release.get("VERSION_ID")) if x)
        return finding("E_NO_DRIVER", "NVIDIA driver",
                       "no NVIDIA driver on this host (no %s, and libnvidia-ml cannot be loaded: %s): %s"
                       % (control, error, how), error=error, package=package, distribution=distribution)
    if library_missing:
        why = "; the kernel module is loaded (%s) but its libnvidia-ml library is missing" % control
    elif not has_control:
        why = "; no %s: the kernel module is not loaded (a reboot after the driver install?)" % control
    else:
        why = ""
    return finding("E_NVML", "nvml", "NVML could not be initialised: %s%s" % (error, why), error=error)


def _pids_in_containers(pids, container_ids, proc_root):
    """The pids whose cgroup names one of the given container ids (our own engine)."""
    ours = set()
    if not container_ids:
        return ours
    for pid in pids:
        try:
            with open(os.path.join(proc_root, str(pid), "cgroup")) as f:
                cgroup = f.read()
        except (IOError, OSError):
            continue
        if any(cid and cid in cgroup for cid in container_ids):
            ours.add(pid)
    return ours


def _processes(call, handle, unanswered):
    procs = {}
    for key, fn in (("compute_processes", "nvmlDeviceGetComputeRunningProcesses"),
                    ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses")):
        listed, err = call(fn, handle)
        if err:
            unanswered[key] = err
            continue
        for p in listed or []:
            pid = getattr(p, "pid", None)
            used = getattr(p, "usedGpuMemory", None)
            # NVML_VALUE_NOT_AVAILABLE comes back as None or as a huge unsigned value.
            mib = int(used // MIB) if isinstance(used, int) and used < (1 << 62) else None
            if pid not in procs or (mib or 0) > (procs[pid] or 0):
                procs[pid] = mib
    return [{"pid": pid, "used_mib": mib} for pid, mib in sorted(procs.items())]


def _device_facts(call, index):
    handle, err = call("nvmlDeviceGetHandleByIndex", index)
    if err:
        return None, err
    gpu = {"index": index}
    # What a check needs and NVML did not answer: {fact: error}, so that the check says it was not made.
    unanswered = {}

    def ask(key, fn, *args):
        value, err = call(fn, handle, *args)
        if err:
            unanswered[key] = err
        return value

    gpu["name"] = _text(call("nvmlDeviceGetName", handle)[0])
    gpu["uuid"] = _text(call("nvmlDeviceGetUUID", handle)[0])
    pci = ask("pci_bus_id", "nvmlDeviceGetPciInfo")
    gpu["pci_bus_id"] = _text(getattr(pci, "busId", None)) if pci is not None else None
    mem = ask("memory_free_mib", "nvmlDeviceGetMemoryInfo")
    if mem is not None:
        gpu["memory_total_mib"] = int(mem.total // MIB)
        gpu["memory_free_mib"] = int(mem.free // MIB)
        gpu["memory_used_mib"] = int(mem.used // MIB)
    cc = ask("compute_capability", "nvmlDeviceGetCudaComputeCapability")
    gpu["compute_capability"] = "%d.%d" % tuple(cc) if cc else None
    enforced = ask("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit")
    gpu["power_limit_w"] = enforced / 1000.0 if enforced is not None else None
    default = call.value("nvmlDeviceGetPowerManagementDefaultLimit", handle)
    gpu["power_default_w"] = default / 1000.0 if default is not None else None
    constraints = call.value("nvmlDeviceGetPowerManagementLimitConstraints", handle)
    gpu["power_range_w"] = [c / 1000.0 for c in constraints] if constraints else None
    mig = ask("mig_mode", "nvmlDeviceGetMigMode")
    gpu["mig_mode"] = {"current": mig[0], "pending": mig[1]} if mig else None
    for key, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                    ("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        gpu[key] = ask(key, fn)
    ecc = ask("ecc_mode", "nvmlDeviceGetEccMode")
    gpu["ecc_mode"] = {"current": ecc[0], "pending": ecc[1]} if ecc else None
    gpu["ecc_uncorrected_volatile"] = ask("ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors",
                                          MEMORY_ERROR_TYPE_UNCORRECTED, VOLATILE_ECC)
    rows = ask("remapped_rows", "nvmlDeviceGetRemappedRows")
    gpu["remapped_rows"] = (dict(zip(("correctable", "uncorrectable", "pending", "failure"), rows))
                            if rows else None)
    retired = {}
    for key, cause in (("single_bit", RETIRE_CAUSE_SINGLE_BIT), ("double_bit", RETIRE_CAUSE_DOUBLE_BIT)):
        pages, perr = call("nvmlDeviceGetRetiredPages", handle, cause)
        if not perr:
            retired[key] = len(pages or [])
        else:
            unanswered["retired_pages"] = perr
    pending, perr = call("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    if not perr:
        retired["pending"] = int(pending)
    elif retired:
        unanswered["retired_pages_pending"] = perr
    gpu["retired_pages"] = retired or None
    gpu["temperature_c"] = call("nvmlDeviceGetTemperature", handle, 0)[0]
    gpu["processes"] = _processes(call, handle, unanswered)
    gpu["unanswered"] = unanswered
    return (gpu, handle), None


def _p2p(call, handles, a, b):
    pair = {"pair": "%d-%d" % (a, b), "from": a, "to": b, "caps": {}}
    for name, index in P2P_CAPS:
        status, err = call("nvmlDeviceGetP2PStatus", handles[a], handles[b], index, record=False)
        pair["caps"][name] = {"error": err} if err else P2P_STATUS.get(status, "STATUS_%s" % status)
    topo, err = call("nvmlDeviceGetTopologyCommonAncestor", handles[a], handles[b], record=False)
    # Recorded, never judged: NVML said HOSTBRIDGE for an NVLink pair on a real host.
    pair["topology"] = TOPOLOGY.get(topo, topo) if not err else None
    required = [pair["caps"][c] for c in P2P_REQUIRED]
    if any(isinstance(s, str) and s != "OK" for s in required):
        pair["peer_access"] = "not_ok"
    elif any(s == "OK" for s in required):
        pair["peer_access"] = "ok"
    else:
        pair["peer_access"] = "unknown"
    return pair


def run_checks(nvml, gpus, min_free_mib, expected_power_w, min_compute_capability="8.9",
               min_cuda_version=None, max_ecc_uncorrected=0, max_retired_pages=0,
               own_container_ids=(), proc_root="/proc", dev_root="/dev", release=None):
    """Return (facts, findings) for the GPUs named by `gpus` (NVML indices). `dev_root` and `release`
    (os-release fields) tell a host without a driver from one whose driver does not answer."""
    findings = []
    facts = {"gpus": [], "p2p": [], "nvml_unanswered": []}
    call = _Calls(nvml)

    err = call("nvmlInit")[1]
    if err:
        findings.append(_init_finding(err, call.last_exception, dev_root, release))
        return facts, findings
    try:
        facts["driver_version"] = _text(call("nvmlSystemGetDriverVersion")[0])
        facts["nvml_version"] = _text(call("nvmlSystemGetNVMLVersion")[0])
        cuda = call.value("nvmlSystemGetCudaDriverVersion_v2")
        if cuda is None:
            cuda = call.value("nvmlSystemGetCudaDriverVersion")
        facts["cuda_driver_version"] = cuda_version_text(cuda) if cuda else None
        count, err = call("nvmlDeviceGetCount")
        if err:
            findings.append(finding("E_NVML", "nvml", "NVML could not count the GPUs: %s" % err, error=err))
            return facts, findings
        facts["count"] = count

        if min_cuda_version and not cuda:
            findings.append(finding(
                "W_CHECK_SKIPPED", "driver %s" % facts["driver_version"],
                "the driver's CUDA version was not checked against the image's (CUDA %s, E_DRIVER_CUDA): NVML did "
                "not report the CUDA version the driver supports (%s)" % (min_cuda_version, "; ".join(
                    u["error"] for u in call.unanswered if u["call"].startswith("nvmlSystemGetCudaDriverVersion"))
                    or "no version"),
                check="E_DRIVER_CUDA", image_cuda=str(min_cuda_version)))
        if min_cuda_version and cuda:
            needed = cuda_version_int(min_cuda_version)
            if cuda < needed:
                findings.append(finding(
                    "E_DRIVER_CUDA", "driver %s" % facts["driver_version"],
                    "driver %s supports CUDA up to %s; the engine image needs CUDA %s"
                    % (facts["driver_version"], cuda_version_text(cuda), min_cuda_version),
                    driver_cuda=cuda_version_text(cuda), image_cuda=str(min_cuda_version)))

        missing = [i for i in gpus if i < 0 or i >= count]
        if count == 0 or missing:
            findings.append(finding(
                "E_GPU_COUNT", "gpus %s" % ",".join(str(i) for i in (missing or gpus)),
                "llm_gpus names %s but the driver sees %d GPU(s)%s"
                % (list(gpus), count, " (no GPU index %s)" % ",".join(str(i) for i in missing) if missing else ""),
                visible=count, wanted=list(gpus)))

        handles = {}
        for index in range(count):
            got, err = _device_facts(call, index)
            if err:
                findings.append(finding("E_NVML", "GPU %d" % index,
                                        "NVML could not open GPU %d: %s" % (index, err), error=err))
                continue
            gpu, handle = got
            gpu["selected"] = index in gpus
            facts["gpus"].append(gpu)
            handles[index] = handle
            if gpu["selected"]:
                findings.extend(_gpu_findings(gpu, min_free_mib, expected_power_w, min_compute_capability,
                                              max_ecc_uncorrected, max_retired_pages,
                                              own_container_ids, proc_root))

        findings.extend(_skipped_findings([g for g in facts["gpus"] if g["selected"]], expected_power_w))
        selected = [i for i in gpus if i in handles]
        facts["p2p"] = [_p2p(call, handles, a, b) for a in selected for b in selected if a != b]
        findings.extend(_p2p_findings(facts["p2p"]))
    finally:
        call("nvmlShutdown", record=False)
    facts["nvml_unanswered"] = call.unanswered
    return facts, findings


def _gpu_findings(gpu, min_free_mib, expected_power_w, min_cc, max_ecc, max_retired,
                  own_container_ids, proc_root):
    out = []
    i = gpu["index"]
    subject = "GPU %d" % i
    label = "GPU %d (%s, %s)" % (i, gpu.get("name"), gpu.get("pci_bus_id"))

    cc = gpu.get("compute_capability")
    if cc and tuple(int(x) for x in cc.split(".")) < tuple(int(x) for x in str(min_cc).split(".")):
        out.append(finding("E_GPU_ARCH", subject, "%s has compute capability %s; at least %s is needed"
                           % (label, cc, min_cc), compute_capability=cc, minimum=str(min_cc)))

    mig = gpu.get("mig_mode") or {}
    if mig.get("current") or mig.get("pending"):
        out.append(finding("E_MIG", subject, "%s has MIG mode on (current %s, pending %s)"
                           % (label, mig.get("current"), mig.get("pending")), mig_mode=mig))

    ecc = gpu.get("ecc_uncorrected_volatile")
    if ecc is not None and ecc > max_ecc:
        out.append(finding("E_GPU_HEALTH", subject, "%s has %d uncorrected ECC errors since the last reset "
                           "(threshold %d)" % (label, ecc, max_ecc), ecc_uncorrected_volatile=ecc))
    rows = gpu.get("remapped_rows") or {}
    if rows.get("pending") or rows.get("failure"):
        out.append(finding("E_GPU_HEALTH", subject, "%s has row remapping %s" % (
            label, "failed" if rows.get("failure") else "pending (a reset applies it)"), remapped_rows=rows))
    retired = gpu.get("retired_pages") or {}
    retired_total = retired.get("single_bit", 0) + retired.get("double_bit", 0)
    if retired.get("pending") or retired_total > max_retired:
        out.append(finding("E_GPU_HEALTH", subject, "%s has %d retired pages (threshold %d)%s" % (
            label, retired_total, max_retired, ", a retirement pending" if retired.get("pending") else ""),
            retired_pages=retired))

    procs = gpu.get("processes") or []
    ours = _pids_in_containers([p["pid"] for p in procs], own_container_ids, proc_root)
    others = [p for p in procs if p["pid"] not in ours]
    if others:
        out.append(finding("E_GPU_BUSY", subject, "%s is used by %s" % (label, ", ".join(
            "pid %s (%s MiB)" % (p["pid"], p["used_mib"] if p["used_mib"] is not None else "?") for p in others)),
            processes=others))

    free = gpu.get("memory_free_mib")
    if free is not None:
        # Memory our own engine holds comes back when it restarts.
        free_for_us = free + sum(p["used_mib"] or 0 for p in procs if p["pid"] in ours)
        if free_for_us < min_free_mib:
            out.append(finding("E_GPU_MEMORY", subject, "%s has %d MiB free of %d MiB; at least %d MiB is needed"
                               % (label, free_for_us, gpu.get("memory_total_mib", 0), min_free_mib),
                               free_mib=free_for_us, min_free_mib=min_free_mib))

    limit = gpu.get("power_limit_w")
    if expected_power_w and limit is not None and abs(limit - expected_power_w) >= 1:
        out.append(finding("W_POWER", subject, "%s enforces a %g W power limit, not the expected %g W; "
                           "it is not changed" % (label, limit, expected_power_w),
                           power_limit_w=limit, expected_power_w=expected_power_w))

    gen, gen_max = gpu.get("pcie_gen"), gpu.get("pcie_gen_max")
    width, width_max = gpu.get("pcie_width"), gpu.get("pcie_width_max")
    short = []
    if gen is not None and gen_max is not None and gen < gen_max:
        short.append("generation %d of %d" % (gen, gen_max))
    if width is not None and width_max is not None and width < width_max:
        short.append("width x%d of x%d" % (width, width_max))
    if short:
        out.append(finding("W_PCIE_LINK", subject, "%s links at %s" % (label, " and ".join(short)),
                           pcie_gen=gen, pcie_gen_max=gen_max, pcie_width=width, pcie_width_max=width_max))
    return out


def _not_supported(error):
    """NVML's Not Supported: the GPU has no such feature (no MIG, no ECC), as opposed to a query that failed."""
    return "NotSupported" in error or "Not Supported" in error


def _skipped(gpu, expected_power_w):
    """[(check, the code it stands for, why it was not made)] for one GPU: every check whose reading NVML did
    not answer. A GPU without MIG (NVML: Not Supported) has no MIG mode to judge: its check is made."""
    missing = gpu.get("unanswered") or {}
    out = []

    def why(*keys):
        return "; ".join("%s (%s)" % (WHAT[k], missing[k]) for k in keys if k in missing)

    if "compute_capability" in missing:
        out.append(("compute capability", "E_GPU_ARCH", why("compute_capability")))
    if "mig_mode" in missing and not _not_supported(missing["mig_mode"]):
        out.append(("MIG mode", "E_MIG", why("mig_mode")))
    if "ecc_uncorrected_volatile" in missing:
        off = (gpu.get("ecc_mode") or {}).get("current") == 0
        out.append(("uncorrected ECC errors", "E_GPU_HEALTH", "ECC is off on it, so NVML counts none (%s)" % missing[
            "ecc_uncorrected_volatile"] if off else why("ecc_uncorrected_volatile")))
    # Row remapping (Ampere and later) or page retirement (before): either one answering is the check made.
    if gpu.get("remapped_rows") is None and gpu.get("retired_pages") is None:
        out.append(("row remapping and retired pages", "E_GPU_HEALTH", why("remapped_rows", "retired_pages")))
    elif gpu.get("remapped_rows") is None and "retired_pages_pending" in missing:
        out.append(("pages pending retirement", "E_GPU_HEALTH", why("retired_pages_pending")))
    if "compute_processes" in missing or "graphics_processes" in missing:
        out.append(("other processes", "E_GPU_BUSY", why("compute_processes", "graphics_processes")))
    if "memory_free_mib" in missing:
        out.append(("free memory", "E_GPU_MEMORY", why("memory_free_mib")))
    if expected_power_w and "power_limit_w" in missing:
        out.append(("power limit", "W_POWER", why("power_limit_w")))
    link = [k for k in ("pcie_gen", "pcie_gen_max", "pcie_width", "pcie_width_max") if k in missing]
    if link:
        part = ("PCIe link" if len([k for k in link if "gen" in k]) and len([k for k in link if "width" in k])
                else "PCIe link generation" if "gen" in link[0] else "PCIe link width")
        out.append((part, "W_PCIE_LINK", why(*link)))
    if "pci_bus_id" in missing:
        out.append(("ACS and IOMMU (host checks)", "E_ACS", why("pci_bus_id") + ", so the host checks cannot find "
                    "it in sysfs"))
    return out


# What each reading is, in the words of a skipped check's message.
WHAT = {
    "compute_capability": "NVML did not report the compute capability",
    "mig_mode": "NVML did not report the MIG mode",
    "ecc_uncorrected_volatile": "NVML did not report the uncorrected ECC error count",
    "remapped_rows": "NVML did not report the remapped rows",
    "retired_pages": "nor the retired pages",
    "retired_pages_pending": "NVML did not say whether pages are pending retirement",
    "compute_processes": "NVML did not list the compute processes",
    "graphics_processes": "NVML did not list the graphics processes",
    "memory_free_mib": "NVML did not report the memory",
    "power_limit_w": "NVML did not report the enforced power limit",
    "pcie_gen": "NVML did not report the current PCIe link generation",
    "pcie_gen_max": "NVML did not report the maximum PCIe link generation",
    "pcie_width": "NVML did not report the current PCIe link width",
    "pcie_width_max": "NVML did not report the maximum PCIe link width",
    "pci_bus_id": "NVML did not report the PCI bus id",
}


def _skipped_findings(gpus, expected_power_w):
    """One W_CHECK_SKIPPED per check and reason, naming the GPUs it was not made on: the check neither
    passed nor failed there, and the report says so instead of nothing."""
    grouped = {}
    for gpu in gpus:
        for check, code, why in _skipped(gpu, expected_power_w):
            grouped.setdefault((check, code, why), []).append(gpu["index"])
    out = []
    for (check, code, why), indices in sorted(grouped.items(), key=lambda kv: (kv[1][0], kv[0])):
        where = ("GPU %d" if len(indices) == 1 else "GPUs %s") % (
            indices[0] if len(indices) == 1 else ", ".join(str(i) for i in indices))
        out.append(finding("W_CHECK_SKIPPED", where, "the %s check (%s) was not made on %s: %s" % (
            check, code, where, why), check=code, what=check, gpus=indices, why=why))
    return out


def _p2p_findings(pairs):
    """E_P2P for each pair NVML says is not OK; W_P2P_UNKNOWN for each pair and capability NVML could
    not answer, or one for a capability no pair answered (a driver or binding that cannot ask it)."""
    out = []
    nowhere = [cap for cap in P2P_REQUIRED if len(pairs) > 1 and all(isinstance(p["caps"][cap], dict) for p in pairs)]
    for pair in pairs:
        subject = "GPU pair %d->%d" % (pair["from"], pair["to"])
        bad = dict((c, s) for c, s in pair["caps"].items() if c in P2P_REQUIRED and isinstance(s, str) and s != "OK")
        if bad:
            out.append(finding("E_P2P", subject, "NVML reports peer access not OK from GPU %d to GPU %d: %s" % (
                pair["from"], pair["to"], ", ".join("%s %s" % kv for kv in sorted(bad.items()))), caps=pair["caps"]))
        for cap in P2P_REQUIRED:
            status = pair["caps"][cap]
            if isinstance(status, dict) and cap not in nowhere:
                out.append(finding("W_P2P_UNKNOWN", subject, "NVML could not answer the %s peer-access query "
                                   "from GPU %d to GPU %d: %s" % (cap, pair["from"], pair["to"], status["error"]),
                                   capability=cap, error=status["error"]))
    for cap in nowhere:
        errors = sorted(set(p["caps"][cap]["error"] for p in pairs))
        others = []
        for other in P2P_REQUIRED:
            answers = [p["caps"][other] for p in pairs if not isinstance(p["caps"][other], dict)]
            if other != cap and answers:
                counts = dict((a, answers.count(a)) for a in answers)
                others.append("the %s query answered %s" % (other, ", ".join(
                    "%s on %s" % (a, "every pair" if n == len(pairs) else "%d pairs" % n)
                    for a, n in sorted(counts.items()))))
        out.append(finding("W_P2P_UNKNOWN", "all %d GPU pairs" % len(pairs),
                           "NVML could not answer the %s peer-access query on any of the %d GPU pairs (%s)%s"
                           % (cap, len(pairs), "; ".join(errors), "; " + "; ".join(others) if others else ""),
                           capability=cap, error="; ".join(errors), pairs=[p["pair"] for p in pairs]))
    return out
