"""Another host, on a network of its own (TEST PLUMBING, not the collection's). The test hosts share the machine's
network namespace, so "another host cannot reach the engine" is tested from a container in a namespace of its own,
on a bridge of the test bed's daemon, that reaches the machine at the bridge's gateway address - as a client on the
LAN reaches a serving host at its address. What it reaches there is what a socket bound to that address (or to every
address) serves; a socket bound to loopback is refused, as it is to any other host.

    with Outsider(docker_host, image) as out:
        out.ask([("https", 18250, "GET", "/v1/models", key)], cafile=ca)   # [200]; "refused" where nothing listens
"""
import json
import uuid

from conftest import docker

PROBE = r"""
import http.client, json, ssl, sys
job = json.load(sys.stdin)
out = []
for scheme, port, method, path, key in job["asks"]:
    try:
        if scheme == "https":
            context = ssl.create_default_context(cadata=job["ca"])
            conn = http.client.HTTPSConnection(job["address"], port, timeout=10, context=context)
        else:
            conn = http.client.HTTPConnection(job["address"], port, timeout=10)
        conn.request(method, path, headers={"Authorization": "Bearer " + key} if key else {})
        out.append(conn.getresponse().status)
    except ConnectionRefusedError:
        out.append("refused")
    except Exception as e:  # the test reads it: a timeout, a handshake failure
        out.append("%s: %s" % (type(e).__name__, e))
print(json.dumps(out))
"""


class Outsider(object):
    """A container of the test-host image on a bridge network made for it (both removed on exit)."""

    def __init__(self, docker_host, image):
        self.docker_host, self.image = docker_host, image
        self.name = "gpuserve-test-outsider-%s" % uuid.uuid4().hex[:8]
        self.address = None  # the machine's address on the outsider's network

    def __enter__(self):
        try:
            docker(self.docker_host, "network", "create", "--driver", "bridge", self.name)
            ipam = docker(self.docker_host, "network", "inspect", "-f", "{{json .IPAM.Config}}", self.name).stdout
            self.address = json.loads(ipam)[0]["Gateway"]
            docker(self.docker_host, "run", "-d", "--init", "--name", self.name, "--network", self.name, self.image,
                   "sleep", "infinity")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        docker(self.docker_host, "rm", "-f", self.name, check=False)
        docker(self.docker_host, "network", "rm", self.name, check=False)

    def ask(self, asks, cafile=None):
        """[status or "refused" or the error] of each (scheme, port, method, path, key), asked of the machine's
        address on the outsider's network; https verified with `cafile` as its CA, for that address."""
        ca = open(cafile).read() if cafile else None
        got = docker(self.docker_host, "exec", "-i", self.name, "python3", "-c", PROBE,
                     input=json.dumps({"address": self.address, "ca": ca, "asks": [list(a) for a in asks]}))
        return json.loads(got.stdout.strip().splitlines()[-1])
