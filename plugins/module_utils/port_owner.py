# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Which process holds a listening TCP port on the host, and whether it belongs to a container.

Read from procfs the way `ss -ltnp` does: the port's LISTEN sockets and their inodes in
<proc>/net/tcp{,6}, then the processes whose <proc>/<pid>/fd links to socket:[inode]. A process
belongs to the container when its cgroup names the container's id, or when it is the container's
State.Pid or a descendant of it (a Docker daemon inside a container, a cgroup namespace: the id may
not show, the process tree does). Read-only, standard library only; the procfs root is a parameter
so that tests run the same code on fixture trees (the engine container runs with host networking,
so its sockets are the host's).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import re
import socket

WILDCARDS = ("0.0.0.0", "::")
SOCKET_LINK = re.compile(r"^socket:\[(\d+)\]$")


def _address(hex_addr, family):
    raw = bytes.fromhex(hex_addr)
    # The kernel prints each 32-bit word in host (little-endian) order.
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(family, raw)


def listeners(proc_root, port):
    """[{"address", "port", "inode"}] of every LISTEN socket on `port` (tcp and tcp6)."""
    found = []
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(os.path.join(proc_root, "net", name)) as f:
                lines = f.readlines()[1:]
        except (IOError, OSError):
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A = LISTEN
                continue
            addr_hex, _sep, port_hex = fields[1].partition(":")
            if int(port_hex, 16) != port:
                continue
            found.append({"address": _address(addr_hex, family), "port": port, "inode": fields[9]})
    return found


def answers(listener_address, host):
    """Whether a socket listening at `listener_address` takes connections made to `host` (an address
    or a name; a name, or no host, takes every listener on the port)."""
    host = (host or "").strip("[]")
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except (socket.error, ValueError, OSError):
        return True  # a name (localhost, a DNS name): any listener may be the one reached
    return (listener_address in WILDCARDS or host in WILDCARDS or listener_address == host
            or listener_address == "::ffff:%s" % host)


def _pids(proc_root):
    try:
        names = os.listdir(proc_root)
    except (IOError, OSError):
        return []
    return sorted(int(n) for n in names if n.isdigit())


def holders(proc_root, inodes):
    """({inode: [pid, ...]} of the processes holding each socket inode, [pids whose fd folder could
    not be read for want of permission])."""
    inodes = set(inodes)
    held, unreadable = dict((i, []) for i in inodes), []
    for pid in _pids(proc_root):
        folder = os.path.join(proc_root, str(pid), "fd")
        try:
            fds = os.listdir(folder)
        except (IOError, OSError) as e:
            if e.errno in (errno.EACCES, errno.EPERM):
                unreadable.append(pid)
            continue  # gone since the listing, or no fd folder (a kernel thread's is empty)
        for fd in fds:
            try:
                match = SOCKET_LINK.match(os.readlink(os.path.join(folder, fd)))
            except (IOError, OSError):
                continue
            if match and match.group(1) in inodes and pid not in held[match.group(1)]:
                held[match.group(1)].append(pid)
    return held, unreadable


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as f:
            return f.read()
    except (IOError, OSError):
        return None


def parent(proc_root, pid):
    """The parent pid from <proc>/<pid>/stat, or None (the command in it may hold spaces and parentheses)."""
    stat = _read(os.path.join(proc_root, str(pid), "stat"))
    if not stat or ")" not in stat:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    try:
        return int(fields[1])
    except (IndexError, ValueError):
        return None


def command(proc_root, pid):
    """The process's command line as one string (its name from stat when the command line is empty)."""
    raw = _read(os.path.join(proc_root, str(pid), "cmdline"), binary=True)
    if raw:
        return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)[:300]
    stat = _read(os.path.join(proc_root, str(pid), "stat")) or ""
    return "[%s]" % stat[stat.find("(") + 1:stat.rfind(")")] if "(" in stat else "?"


def belongs(proc_root, pid, container_id, container_pid):
    """Whether the process is the container's: its cgroup names the container id, or it is the
    container's main process or a descendant of it."""
    if container_id:
        cgroup = _read(os.path.join(proc_root, str(pid), "cgroup")) or ""
        if container_id in cgroup:
            return True
    if not container_pid:
        return False
    seen = set()
    while pid and pid not in seen:
        if pid == container_pid:
            return True
        seen.add(pid)
        pid = parent(proc_root, pid)
    return False


def sees(proc_root, container_id, container_pid, program=None):
    """Whether the container's main process shows in proc_root as itself (its cgroup names the container):
    false when the Docker daemon runs in another PID namespace (a daemon in a container, or on another
    machine through llm_docker_host), where no process of the container can be seen and no port proven.
    `program`: the container's Path (inspect), matched where the cgroup cannot name the id."""
    if not container_pid or not container_id:
        return False
    cgroup = _read(os.path.join(proc_root, str(container_pid), "cgroup"))
    if cgroup is None:
        return False
    if container_id in cgroup:
        return True
    # In a cgroup namespace a process prints "0::/": the id cannot show, so the program must be the container's.
    first = (command(proc_root, container_pid).split() or [""])[0]
    return cgroup.strip() == "0::/" and bool(program) and os.path.basename(first) == os.path.basename(program)


def owner(proc_root, port, host, container_id, container_pid):
    """Who holds the sockets listening on `port` that connections to `host` reach.

    Returns {"state": ..., "listeners": [...], "others": [...], "ours": [...], "unreadable": n}, where
    state is "ours" (every such socket is held by the container's processes), "other" (a process
    outside the container holds one: "others" lists {"pid", "command", "address"}), "none" (nothing
    listens there) or "unknown" (a socket no visible process holds: gone in between, or /proc/<pid>/fd
    not readable without root).
    """
    found = [s for s in listeners(proc_root, port) if answers(s["address"], host)]
    result = {"listeners": ["%s:%d" % (s["address"], port) for s in found], "others": [], "ours": [],
              "unreadable": 0}
    if not found:
        result["state"] = "none"
        return result
    held, unreadable = holders(proc_root, [s["inode"] for s in found])
    result["unreadable"] = len(unreadable)
    orphaned = False
    for s in found:
        pids = held.get(s["inode"]) or []
        if not pids:
            orphaned = True
        for pid in pids:
            entry = {"pid": pid, "command": command(proc_root, pid), "address": "%s:%d" % (s["address"], port)}
            if belongs(proc_root, pid, container_id, container_pid):
                result["ours"].append(entry)
            else:
                result["others"].append(entry)
    result["state"] = "other" if result["others"] else "unknown" if orphaned else "ours"
    return result
