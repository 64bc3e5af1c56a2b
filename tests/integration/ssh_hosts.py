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
- Networking: the test bed's daemon has no bridge (--bridge none), so the hosts share the machine's
  network namespace (--network host), as the host stage's test hosts always have (their own Docker
  daemon, the engine's port and the test's apt mirror on 127.0.0.1). Each sshd listens on 127.0.0.1 on
  a port of its own; known_hosts names it as [127.0.0.1]:PORT.

    with SSHHosts(docker_host, workdir, image, ["a", "b"], run_args=[...]) as hosts:
        hosts.inventory_vars("a")                  # deploy, become
        hosts.inventory_vars("b", user="nosudo")   # no sudo
"""
import os
import socket
import subprocess
import time

SSHD_CONFIG = """# gpuserve.llm tests (tests/integration/ssh_hosts.py)
Port {port}
ListenAddress 127.0.0.1
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
AllowUsers deploy nosudo
PidFile /run/sshd-gpuserve.pid
"""


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's pick; sshd binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SSHHosts(object):
    """Start the hosts (a context manager: every container, volume and SSH master stops after)."""

    def __init__(self, docker_host, workdir, image, names, run_args=(), users=("deploy", "nosudo"), volumes=()):
        """`run_args`: docker run's options for every host ({name} is the host's name: a volume of its own);
        `volumes`: the named volumes (formats with {name}) removed with the hosts."""
        self.docker_host, self.image, self.names = docker_host, image, list(names)
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
        for name in self.names:
            self.ports[name] = port = free_port()
            self.started.append(name)
            self.docker("run", "-d", "--init", "--name", name, "--network", "host",
                        *([a.format(name=name) for a in self.run_args] + [self.image, "sleep", "infinity"]))
            # Host keys of this host alone (the image holds none), then sshd on its port.
            self.sh(name, "ssh-keygen -A >/dev/null && mkdir -p /run/sshd && cat > /etc/ssh/sshd_config.d/gpuserve.conf",
                    SSHD_CONFIG.format(port=port))
            for user in self.users:
                self.sh(name, "install -d -m 700 -o {u} -g {u} /home/{u}/.ssh && cat > /home/{u}/.ssh/authorized_keys && "
                        "chown {u}:{u} /home/{u}/.ssh/authorized_keys && chmod 600 /home/{u}/.ssh/authorized_keys".format(
                            u=user), public)
            self.sh(name, "/usr/sbin/sshd -t && /usr/sbin/sshd")
            for pub in self.sh(name, "cat /etc/ssh/ssh_host_*_key.pub").stdout.splitlines():
                kind, blob = pub.split()[:2]
                lines.append("[127.0.0.1]:%d %s %s\n" % (port, kind, blob))
        with open(self.known_hosts, "w") as f:
            f.writelines(lines)
        for name in self.names:
            self.wait(name)
        return self

    def ssh_args(self):
        """The options every SSH connection of the run takes (Ansible's ansible_ssh_common_args too)."""
        return ["-o", "UserKnownHostsFile=%s" % self.known_hosts, "-o", "StrictHostKeyChecking=yes",
                "-o", "IdentitiesOnly=yes"]

    def ssh(self, name, command, user="deploy"):
        """`command` on the host over SSH as `user` (the way Ansible connects)."""
        return subprocess.run(["ssh", "-i", self.key, "-p", str(self.ports[name]), "-o", "BatchMode=yes"]
                              + self.ssh_args() + ["%s@127.0.0.1" % user, command],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False, timeout=60)

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
        found = dict(ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=self.ports[name],
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
