# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""The few Docker Engine API calls community.docker has no module for (a container's log), with
the standard library: GET over the daemon's unix socket or plain tcp."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import socket
import struct

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import fail

try:
    from http.client import HTTPConnection
    from urllib.parse import quote
except ImportError:  # Python 2 (ansible-test's import sanity only)
    from httplib import HTTPConnection  # type: ignore
    from urllib import quote  # type: ignore


class UnixHTTPConnection(HTTPConnection):
    def __init__(self, path, timeout=60):
        HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def connection(docker_host):
    if docker_host.startswith("unix://"):
        return UnixHTTPConnection(docker_host[len("unix://"):])
    if docker_host.startswith("tcp://"):
        host, _sep, port = docker_host[len("tcp://"):].partition(":")
        return HTTPConnection(host, int(port or 2375), timeout=60)
    raise ValueError("docker_host must be unix:// or tcp://, not %r" % docker_host)


def get(docker_host, path):
    """(status, body bytes) of GET path on the daemon."""
    conn = connection(docker_host)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def demultiplex(data):
    """The Engine API's log stream without a TTY: frames of [stream, 0, 0, 0, size (4 bytes)] + payload."""
    out, i = [], 0
    while i + 8 <= len(data):
        size = struct.unpack(">I", data[i + 4:i + 8])[0]
        out.append(data[i + 8:i + 8 + size])
        i += 8 + size
    return b"".join(out)


def inspect(docker_host, name):
    """The container's inspect document, or None when there is none of that name."""
    status, body = get(docker_host, "/containers/%s/json" % quote(name, safe=""))
    if status == 404:
        return None
    if status != 200:
        raise IOError("the Docker daemon at %s answered %d for container %s" % (docker_host, status, name))
    return json.loads(body.decode("utf-8"))


def logs(docker_host, name, tty=False):
    """The container's whole log (stdout and stderr interleaved as docker logs shows them)."""
    status, body = get(docker_host, "/containers/%s/logs?stdout=1&stderr=1&tail=all" % quote(name, safe=""))
    if status != 200:
        raise IOError("the Docker daemon answered %d for the logs of %s" % (status, name))
    return (body if tty else demultiplex(body)).decode("utf-8", "replace")


def log_tail(docker_host, name, count, blank_lines=True):
    """(the container's inspect document, or None when there is none of that name; the last `count`
    lines of its log, blank ones left out unless `blank_lines`)."""
    info = inspect(docker_host, name)
    if info is None:
        return None, []
    lines = logs(docker_host, name, info.get("Config", {}).get("Tty", False)).splitlines()
    if not blank_lines:
        lines = [line for line in lines if line.strip()]
    return info, lines[-count:]


def fail_with_log(module, code, docker_host, container, count, message):
    """End the module with the finding and the engine log's last lines, in the message and beside it."""
    try:
        info, lines = log_tail(docker_host, container, count)
        if info is None:
            lines = ["(no container %s)" % container]
    except (IOError, OSError, ValueError) as e:
        lines = ["(the log could not be read: %s)" % e]
    fail(module, code, container, message, details=dict(log_lines=lines),
         shown="\nThe engine log's last lines:\n%s" % "\n".join(lines), log_lines=lines)
