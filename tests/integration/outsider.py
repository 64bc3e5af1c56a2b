"""Another host: a client machine (TEST PLUMBING, not the collection's), a container in a network namespace of its
own, so that "another host cannot reach the engine" is tested, not assumed. Two places:
- on a bridge made for it (network=None), reaching the machine at the bridge's gateway (`.address`): a test host
  that shares the machine's namespace is served there to whoever is on the LAN;
- on the fleet's lan (tests/integration/ssh_hosts.py HostNetworks), reaching each host at its own address, and
  none of the backend's (the machine does not route the lan there).
What it reaches is what a socket bound to that address (or to every address) serves; a socket bound to loopback
is refused, as it is to any other host; a private address it has no route to is "unreachable".

    with Outsider(docker_host, image) as out:
        out.ask([("https", out.address, 18250, "GET", "/v1/models", key)], cafile=ca)   # [200]; "refused"
"""
import json
import uuid

from conftest import docker

PROBE = r"""
import errno, http.client, json, ssl, sys
job = json.load(sys.stdin)
out = []
for scheme, address, port, method, path, key in job["asks"]:
    try:
        if scheme == "https":
            context = ssl.create_default_context(cadata=job["ca"])
            conn = http.client.HTTPSConnection(address, port, timeout=10, context=context)
        else:
            conn = http.client.HTTPConnection(address, port, timeout=10)
        conn.request(method, path, headers={"Authorization": "Bearer " + key} if key else {})
        out.append(conn.getresponse().status)
    except ConnectionRefusedError:
        out.append("refused")
    except OSError as e:
        if e.errno not in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            raise
        out.append("unreachable")
    except Exception as e:  # the test reads it: a timeout, a handshake failure
        out.append("%s: %s" % (type(e).__name__, e))
print(json.dumps(out))
"""


class Outsider(object):
    """A container of the test-host image on `network`, or on a bridge network made for it (removed with it)."""

    def __init__(self, docker_host, image, network=None):
        self.docker_host, self.image, self.network = docker_host, image, network
        self.name = "gpuserve-test-outsider-%s" % uuid.uuid4().hex[:8]
        self.address = None  # the machine's address on a network made for the outsider

    def __enter__(self):
        try:
            if self.network is None:
                docker(self.docker_host, "network", "create", "--driver", "bridge", self.name)
                ipam = docker(self.docker_host, "network", "inspect", "-f", "{{json .IPAM.Config}}", self.name).stdout
                self.address = json.loads(ipam)[0]["Gateway"]
            docker(self.docker_host, "run", "-d", "--init", "--name", self.name, "--network",
                   self.network or self.name, self.image, "sleep", "infinity")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        docker(self.docker_host, "rm", "-f", self.name, check=False)
        if self.network is None:
            docker(self.docker_host, "network", "rm", self.name, check=False)

    def ask(self, asks, cafile=None):
        """[status, "refused", "unreachable" or the error] of each (scheme, address, port, method, path, key);
        https verified with `cafile` as its CA, for that address."""
        ca = open(cafile).read() if cafile else None
        got = docker(self.docker_host, "exec", "-i", self.name, "python3", "-c", PROBE,
                     input=json.dumps({"ca": ca, "asks": [list(a) for a in asks]}))
        return json.loads(got.stdout.strip().splitlines()[-1])
