"""SSH test hosts for the playbook tests (pytest fixture helpers; TEST PLUMBING, not the collection's).

Each host is a container from the test-host image (tests/testbed/images.sh: openssh-server, sudo, the
users `deploy` with passwordless sudo and `nosudo` without) on the test bed's daemon, with its own sshd
and its own host keys, made when it starts. Ansible reaches it the way it reaches a real host: over SSH
with a key, as a user that is not root, becoming root through sudo.

- The client key is made per run (ssh-keygen into the run's folder) and put into both users'
  authorized_keys; no password anywhere.
- Host keys are checked: each host's public keys are read out of band (docker exec, as an admin reads
  them on the console) into a known_hosts file of the run, and the inventory names it with
  UserKnownHostsFile and StrictHostKeyChecking=yes. Nothing turns host key checking off.
- Networking (HostNetworks): each host has a network namespace of its own on two bridges of the test
  bed's daemon, as the machines of a fleet have: `lan` (SSH, the fronts, clients; the machine, at its
  gateway address there, serves the test's apt mirror and hub and NATs the hosts to the world so that apt
  reaches Debian's archive) and `backend` (the private network the engines listen on: the router hosts
  reach it, a client on the lan does not, as the machine does not route the lan to it). sshd listens on
  the host's lan address, port 22; known_hosts names that address.

    with HostNetworks(docker_host, "fleet") as nets, SSHHosts(docker_host, workdir, image, ["a", "b"], nets,
                                                                run_args=[...]) as hosts:
        hosts.inventory_vars("a")                  # deploy, become
        hosts.inventory_vars("b", user="nosudo")   # no sudo
        hosts.address["a"]["backend"]             # its private address
"""
import ipaddress
import json
import os
import subprocess
import time

from conftest import docker

SSHD_CONFIG = """# gpuserve.llm tests (tests/integration/ssh_hosts.py)
Port {port}
ListenAddress {address}
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers deploy nosudo
PidFile /run/sshd-gpuserve.pid
"""


def _iptables(*args):
    subprocess.run(["iptables", "-w"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                   check=True)


class HostNetworks(object):
    """The fleet's two bridges on the test bed's daemon (a context manager: the networks and the machine's
    iptables rules for them go on exit). The test bed's daemon runs with --iptables=false, so the rules a
    machine of a real site has are written here, each tagged with the networks' name:
    - the lan is NAT'd to the machine's uplink (the hosts' apt reaches Debian's archive; DNS too);
    - the backend is not routed from anywhere: a packet the machine would forward into it is refused
      (ICMP net unreachable), so a client on the lan cannot reach a private address; hosts on the backend
      reach one another on the bridge, and the machine (the workstation, the test) reaches it directly."""

    def __init__(self, docker_host, prefix):
        self.docker_host = docker_host
        self.name = dict((kind, "%s-%s" % (prefix, kind)) for kind in ("lan", "backend"))
        self.subnet, self.gateway, self.rules = {}, {}, []

    def docker(self, *args, **kwargs):
        return docker(self.docker_host, *args, **kwargs)

    def __enter__(self):
        try:
            for kind, name in self.name.items():
                self.docker("network", "rm", name, check=False)  # a killed run's
                # A subnet the daemon picks (none of the machine's), then given back to it by name: a host keeps
                # its addresses (--ip) when its container starts again only on a network with a subnet given.
                self.docker("network", "create", "--driver", "bridge", name)
                [ipam] = json.loads(self.docker("network", "inspect", "-f", "{{json .IPAM.Config}}", name).stdout)
                self.docker("network", "rm", name)
                # The backend gives no default route (--internal): a host's way out is its lan.
                internal = ["--internal"] if kind == "backend" else []
                self.docker("network", "create", "--driver", "bridge", "--subnet", ipam["Subnet"], "--gateway",
                            ipam["Gateway"], *internal, name)
                self.subnet[kind], self.gateway[kind] = ipam["Subnet"], ipam["Gateway"]
            lan, backend = self.subnet["lan"], self.subnet["backend"]
            tag = ["-m", "comment", "--comment", "gpuserve-test " + self.name["lan"]]
            # In the order the kernel meets them (each inserted at the top, last first).
            self.rules = [("filter", "FORWARD", ["-s", backend, "-d", backend, "-j", "ACCEPT"]),
                          ("filter", "FORWARD", ["-d", backend, "-j", "REJECT", "--reject-with", "icmp-net-unreachable"]),
                          ("filter", "FORWARD", ["-s", lan, "-j", "ACCEPT"]),
                          ("filter", "FORWARD", ["-d", lan, "-j", "ACCEPT"]),
                          ("nat", "POSTROUTING", ["-s", lan, "!", "-d", lan, "-j", "MASQUERADE"])]
            self.rules = [(table, chain, rule + tag) for table, chain, rule in self.rules]
            with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
                f.write("1\n")
            for table, chain, rule in reversed(self.rules):
                _iptables("-t", table, "-I", chain, "1", *rule)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for table, chain, rule in self.rules:
            subprocess.run(["iptables", "-w", "-t", table, "-D", chain] + rule, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
        for name in self.name.values():
            self.docker("network", "rm", name, check=False)

    def address(self, kind, number):
        """The `number`th address of the network (the hosts from 10 on; 250 is free for a shared address)."""
        return str(ipaddress.ip_network(self.subnet[kind])[number])

    def dns(self):
        """docker run's --dns options: the machine's own name servers (the daemon's embedded DNS forwards to
        them through the NAT), none that is on the machine's loopback."""
        found = []
        with open("/etc/resolv.conf") as f:
            for line in f:
                words = line.split()
                if len(words) > 1 and words[0] == "nameserver" and not ipaddress.ip_address(words[1]).is_loopback:
                    found += ["--dns", words[1]]
        return found


class SSHHosts(object):
    """Start the hosts (a context manager: every container, volume and SSH master stops after)."""

    def __init__(self, docker_host, workdir, image, names, networks, run_args=(), users=("deploy", "nosudo"),
                 volumes=()):
        """`networks`: a HostNetworks (each host on its lan and its backend); `run_args`: docker run's options
        for every host ({name} is the host's name: a volume of its own); `volumes`: the named volumes (formats
        with {name}) removed with the hosts."""
        self.docker_host, self.image, self.names = docker_host, image, list(names)
        self.networks = networks
        self.address = {}  # {name: {"lan": address, "backend": address}}
        self.volumes = list(volumes)
        self.run_args, self.users = list(run_args), list(users)
        self.dir = os.path.join(str(workdir), "ssh")
        self.key = os.path.join(self.dir, "id_ed25519")
        self.known_hosts = os.path.join(self.dir, "known_hosts")
        # Ansible's SSH masters (ControlPersist) live here, so that stop() can end them.
        self.control_dir = os.path.join(self.dir, "cp")
        self.ports = {}
        self.started = []

    def docker(self, *args, **kwargs):
        return subprocess.run(["docker", "-H", self.docker_host] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, check=kwargs.pop("check", True), **kwargs)

    def sh(self, name, command, text=None):
        """`command` as root in the host, `text` on its standard input (out of band, not over SSH)."""
        return self.docker("exec", "-i", name, "sh", "-c", command, input=text)

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        os.makedirs(self.control_dir, mode=0o700)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "gpuserve-tests", "-f", self.key],
                       check=True)
        with open(self.key + ".pub") as f:
            public = f.read()
        lines = []
        for number, name in enumerate(self.names):
            self.started.append(name)
            self.ports[name] = port = 22
            self.address[name] = dict((kind, self.networks.address(kind, 10 + number)) for kind in ("lan", "backend"))
            self.docker("run", "-d", "--init", "--name", name, "--network", self.networks.name["lan"],
                        "--ip", self.address[name]["lan"],
                        *(self.networks.dns() + [a.format(name=name) for a in self.run_args]
                          + [self.image, "sleep", "infinity"]))
            self.docker("network", "connect", "--ip", self.address[name]["backend"], self.networks.name["backend"], name)
            # Host keys of this host alone (the image holds none), then sshd on its port.
            self.sh(name, "ssh-keygen -A >/dev/null && mkdir -p /run/sshd && cat > /etc/ssh/sshd_config.d/gpuserve.conf",
                    SSHD_CONFIG.format(port=port, address=self.address[name]["lan"]))
            for user in self.users:
                self.sh(name, "install -d -m 700 -o {u} -g {u} /home/{u}/.ssh && cat > /home/{u}/.ssh/authorized_keys && "
                        "chown {u}:{u} /home/{u}/.ssh/authorized_keys && chmod 600 /home/{u}/.ssh/authorized_keys".format(
                            u=user), public)
            self.sh(name, "/usr/sbin/sshd -t && /usr/sbin/sshd")
            for pub in self.sh(name, "cat /etc/ssh/ssh_host_*_key.pub").stdout.splitlines():
                kind, blob = pub.split()[:2]
                lines.append("%s %s %s\n" % (self.known_as(name), kind, blob))
        with open(self.known_hosts, "w") as f:
            f.writelines(lines)
        for name in self.names:
            self.wait(name)
        return self

    def known_as(self, name):
        """The host as known_hosts names it (its lan address; port 22)."""
        return self.address[name]["lan"]

    def ssh_args(self):
        """The options every SSH connection of the run takes (Ansible's ansible_ssh_common_args too)."""
        return ["-o", "UserKnownHostsFile=%s" % self.known_hosts, "-o", "StrictHostKeyChecking=yes",
                "-o", "IdentitiesOnly=yes"]

    def ssh(self, name, command, user="deploy"):
        """`command` on the host over SSH as `user` (the way Ansible connects)."""
        return subprocess.run(["ssh", "-i", self.key, "-p", str(self.ports[name]), "-o", "BatchMode=yes"]
                              + self.ssh_args() + ["%s@%s" % (user, self.address[name]["lan"]), command],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=60)

    def start_sshd(self, name):
        """sshd again in a host whose container was stopped and started (its keys and configuration kept)."""
        self.sh(name, "mkdir -p /run/sshd && /usr/sbin/sshd")
        self.wait(name)

    def wait(self, name, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            got = self.ssh(name, "true")
            if got.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("sshd of %s did not let deploy in within %d s: %s" % (name, timeout, got.stdout))
            time.sleep(0.3)

    def inventory_vars(self, name, user="deploy", become=True):
        """The host's connection variables, as an inventory for a real host over SSH holds them."""
        found = dict(ansible_connection="ssh", ansible_host=self.address[name]["lan"], ansible_port=self.ports[name],
                     ansible_user=user, ansible_ssh_private_key_file=self.key,
                     ansible_ssh_common_args=" ".join(self.ssh_args()),
                     ansible_python_interpreter="/usr/bin/python3")
        if become:
            found["ansible_become"] = True
        return found

    def env(self):
        """What ansible-playbook's environment needs: the run's folder for the SSH masters."""
        return {"ANSIBLE_SSH_CONTROL_PATH_DIR": self.control_dir}

    def stop(self):
        if os.path.isdir(self.control_dir):
            for sock in os.listdir(self.control_dir):
                subprocess.run(["ssh", "-o", "ControlPath=%s" % os.path.join(self.control_dir, sock), "-O", "exit", "x"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=30)
        for name in self.started:
            self.docker("rm", "-f", "-v", name, check=False)
            for volume in self.volumes:
                self.docker("volume", "rm", "-f", volume.format(name=name), check=False)
