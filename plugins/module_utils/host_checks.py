# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Host-side preflight checks: PCIe ACS, IOMMU, docker group, API port, disk budget.

Read-only, standard library only. Paths to /sys and /proc are parameters so that tests run
the same code on fixture trees.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re
import socket
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding

GIB = 1024 ** 3
BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
# ACS control register bits (PCIe base spec, 7.7.11.3).
ACS_BITS = (("SrcValid", 0), ("TransBlk", 1), ("ReqRedir", 2), ("CmpltRedir", 3),
            ("UpstreamFwd", 4), ("EgressCtrl", 5), ("DirectTrans", 6))
ACS_REDIRECT = (1 << 2) | (1 << 3)


def sysfs_bdf(nvml_bus_id):
    """'00000000:17:00.0' (NVML) -> '0000:17:00.0' (sysfs)."""
    domain, dummy, rest = nvml_bus_id.lower().rpartition(":")
    domain, dummy, bus = domain.rpartition(":") if domain.count(":") else ("0", "", domain)
    return "%04x:%s:%s" % (int(domain or "0", 16), bus, rest)


def upstream_bridges(sysfs, bdf):
    """The PCI devices on the path from the root complex down to `bdf`, the device itself excluded."""
    link = os.path.join(sysfs, "bus", "pci", "devices", bdf)
    if not os.path.exists(link):
        return None
    parts = os.path.realpath(link).split(os.sep)
    return [p for p in parts if BDF.match(p) and p != bdf]


def acs_control(config_bytes):
    """The ACS control word from a device's config space, None when it has no ACS capability.

    Raises ValueError when only the first 256 bytes are readable (not root): the extended
    capabilities are not visible then.
    """
    if len(config_bytes) <= PCI_EXT_CAP_START:
        raise ValueError("extended config space not readable (%d bytes)" % len(config_bytes))
    offset, seen = PCI_EXT_CAP_START, set()
    while offset and offset not in seen and offset + 8 <= len(config_bytes):
        seen.add(offset)
        header = struct.unpack_from("<I", config_bytes, offset)[0]
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == PCI_EXT_CAP_ID_ACS:
            return struct.unpack_from("<H", config_bytes, offset + 6)[0]
        offset = (header >> 20) & 0xFFC
    return None


def acs_flags(control):
    return [name for name, bit in ACS_BITS if control & (1 << bit)]


def check_acs(sysfs, gpu_bus_ids):
    """E_ACS for a bridge above the GPUs with P2P redirect on; facts per bridge."""
    findings, facts, unreadable = [], {}, []
    if len(gpu_bus_ids) < 2:
        return findings, facts
    for bus_id in gpu_bus_ids:
        bdf = sysfs_bdf(bus_id)
        bridges = upstream_bridges(sysfs, bdf)
        if bridges is None:
            findings.append(finding("W_TOOL_MISSING", "sysfs %s" % bdf,
                                    "no %s in %s/bus/pci/devices: the ACS and IOMMU checks cannot follow GPU %s "
                                    "to the root" % (bdf, sysfs, bus_id), tool="sysfs PCI tree"))
            continue
        for bridge in bridges:
            if bridge in facts:
                continue
            try:
                with open(os.path.join(sysfs, "bus", "pci", "devices", bridge, "config"), "rb") as f:
                    control = acs_control(f.read())
            except (IOError, OSError, ValueError) as e:
                unreadable.append("%s (%s)" % (bridge, e))
                facts[bridge] = {"acs": "unreadable"}
                continue
            facts[bridge] = {"acs_control": None if control is None else "%04x" % control,
                             "acs_flags": [] if control is None else acs_flags(control)}
            if control is not None and control & ACS_REDIRECT:
                findings.append(finding(
                    "E_ACS", "PCIe bridge %s" % bridge,
                    "ACS on bridge %s above GPU %s redirects peer traffic to the root (ACSCtl %04x: %s)"
                    % (bridge, bus_id, control, " ".join(acs_flags(control))),
                    bridge=bridge, acs_control="%04x" % control, gpu=bus_id))
    if unreadable:
        findings.append(finding("W_TOOL_MISSING", "PCIe config space",
                                "ACS could not be read on %s: run the preflight as root (become) to read the "
                                "extended config space" % ", ".join(unreadable), tool="root access to PCIe config space"))
    return findings, facts


def check_iommu(sysfs, proc, gpu_bus_ids):
    """W_IOMMU when a GPU's IOMMU group translates DMA rather than passing it through."""
    findings = []
    facts = {"cmdline": "", "groups": {}}
    try:
        with open(os.path.join(proc, "cmdline")) as f:
            facts["cmdline"] = " ".join(w for w in f.read().split() if "iommu" in w)
    except (IOError, OSError):
        pass
    for bus_id in gpu_bus_ids:
        bdf = sysfs_bdf(bus_id)
        device = os.path.join(sysfs, "bus", "pci", "devices", bdf)
        if not os.path.exists(device):
            facts["groups"][bdf] = "unknown"
            # With two GPUs or more the ACS check has named the GPU missing from sysfs, and these checks with it.
            if len(gpu_bus_ids) < 2:
                findings.append(finding("W_CHECK_SKIPPED", "GPU %s" % bus_id, "the IOMMU check (W_IOMMU) was not made "
                                        "on GPU %s: no %s in %s/bus/pci/devices" % (bus_id, bdf, sysfs),
                                        check="W_IOMMU", what="IOMMU", gpus=[bus_id]))
            continue
        if not os.path.exists(os.path.join(device, "iommu_group")):
            facts["groups"][bdf] = None  # no IOMMU group: the IOMMU is off
            continue
        type_file = os.path.join(device, "iommu_group", "type")
        try:
            with open(type_file) as f:
                kind = f.read().strip()
        except (IOError, OSError) as e:
            # A group whose type cannot be read (kernels before 5.11 have no such file) is not a group that passes.
            facts["groups"][bdf] = "unknown"
            findings.append(finding("W_CHECK_SKIPPED", "GPU %s" % bus_id, "the IOMMU check (W_IOMMU) was not made on "
                                    "GPU %s: %s could not be read (%s)" % (bus_id, type_file, e.strerror or e),
                                    check="W_IOMMU", what="IOMMU", gpus=[bus_id]))
            continue
        facts["groups"][bdf] = kind
        if kind.startswith("DMA"):
            findings.append(finding("W_IOMMU", "GPU %s" % bus_id,
                                    "the IOMMU group of GPU %s translates DMA (type %s; kernel: %s)"
                                    % (bus_id, kind, facts["cmdline"] or "no iommu options"), iommu_type=kind))
    return findings, facts


def check_docker_group(user, uid, groups, socket_gid, group_db):
    """E_DOCKER_GROUP unless the user is root or in the group owning the Docker socket.

    `groups`: gids of the running process; `group_db`: {name: (gid, [members])}.
    """
    if uid == 0:
        return []
    if socket_gid is not None and socket_gid in groups:
        return []
    docker = group_db.get("docker")
    if docker and user in docker[1]:
        return [finding("E_DOCKER_GROUP", "user %s" % user,
                        "user %s is listed in the docker group but this login does not have it yet "
                        "(log in again, or meta: reset_connection)" % user)]
    return [finding("E_DOCKER_GROUP", "user %s" % user,
                    "user %s is not in the docker group%s" % (
                        user, "" if docker else " (there is no docker group on the host)"))]


def _listeners(proc):
    """(address, port) of every listening TCP socket, from /proc/net/tcp and tcp6; and the error reading
    /proc/net/tcp, which every kernel has (tcp6 is absent where IPv6 is off: no IPv6 listener then)."""
    found, unreadable = [], None
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(os.path.join(proc, "net", name)) as f:
                lines = f.readlines()[1:]
        except (IOError, OSError) as e:
            if name == "tcp":
                unreadable = "%s could not be read (%s)" % (os.path.join(proc, "net", name), e.strerror or e)
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A = LISTEN
                continue
            addr_hex, port_hex = fields[1].split(":")
            raw = bytes.fromhex(addr_hex)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((socket.inet_ntop(family, raw), int(port_hex, 16)))
    return found, unreadable


def check_port(proc, host, port):
    """E_PORT_BUSY when something listens on the port at the bind address or a wildcard."""
    wild = ("0.0.0.0", "::")
    listeners, unreadable = _listeners(proc)
    if unreadable:
        return [finding("W_CHECK_SKIPPED", "port %d" % port, "the port check (E_PORT_BUSY) was not made on port %d: %s"
                        % (port, unreadable), check="E_PORT_BUSY", what="port", port=port)]
    clash = [(a, p) for a, p in listeners
             if p == port and (a in wild or host in wild or a == host or a == "::ffff:%s" % host)]
    if clash:
        return [finding("E_PORT_BUSY", "port %d" % port, "port %d is already listened on (%s); the bind address is %s"
                        % (port, ", ".join("%s:%d" % c for c in sorted(set(clash))), host),
                        listeners=["%s:%d" % c for c in sorted(set(clash))])]
    return []


def _existing(path):
    while path and not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path or "/"


def _du(path):
    total = 0
    if not os.path.exists(path):
        return 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            total += st.st_blocks * 512
    return total


def _mount_point(path):
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def check_disk(budget):
    """E_DISK per filesystem where what is still to be written does not fit.

    `budget`: [{"what", "path", "gib", optional "present_bytes"}]. What a path already holds counts against the
    budgets at that path, so a host that has the weights already needs no room for them again: the bytes under
    it, or an item's `present_bytes` where the caller knows better than a walk (Docker's data root: the engine
    image's size, from the daemon).
    """
    paths = {}
    for item in budget:
        entry = paths.setdefault(item["path"], {"what": [], "gib": 0.0, "present": None})
        entry["what"].append(item["what"])
        entry["gib"] += item["gib"]
        if item.get("present_bytes") is not None:
            entry["present"] = (entry["present"] or 0) + int(item["present_bytes"])
    filesystems = {}
    for path, entry in paths.items():
        anchor = _existing(path)
        fs = filesystems.setdefault(os.stat(anchor).st_dev, {"mount": _mount_point(anchor), "items": [], "need": 0})
        vfs = os.statvfs(anchor)
        fs["free"] = vfs.f_bavail * vfs.f_frsize
        have = _du(path) if entry["present"] is None else entry["present"]
        need = max(0, int(entry["gib"] * GIB) - have)
        fs["need"] += need
        fs["items"].append({"what": " + ".join(entry["what"]), "path": path, "budget_gib": entry["gib"],
                            "present_gib": round(have / float(GIB), 3), "need_gib": round(need / float(GIB), 3)})
    findings, facts = [], []
    for fs in filesystems.values():
        fact = {"mount": fs["mount"], "free_gib": round(fs["free"] / float(GIB), 1),
                "need_gib": round(fs["need"] / float(GIB), 1), "items": fs["items"]}
        facts.append(fact)
        if fs["need"] > fs["free"]:
            findings.append(finding(
                "E_DISK", "filesystem %s" % fs["mount"],
                "%s has %.1f GiB free; %.1f GiB more is needed: %s" % (
                    fs["mount"], fact["free_gib"], fact["need_gib"],
                    ", ".join("%s %.1f GiB at %s" % (i["what"], i["need_gib"], i["path"]) for i in fs["items"])),
                free_gib=fact["free_gib"], need_gib=fact["need_gib"], items=fs["items"]))
    return findings, facts
