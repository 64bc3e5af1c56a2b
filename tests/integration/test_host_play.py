"""The host stage for real, on bare Debian 12 test hosts: containers from the test-host image (no
Docker inside) on the test bed's daemon, reached over SSH as the user `deploy` becoming root through
sudo (tests/integration/ssh_hosts.py: sshd in each host, a key made per run, host keys checked
through the run's known_hosts), each with a volume for its own /var/lib/docker so that a Docker
daemon can run inside it. The test reads the hosts out of band (docker exec).

One fleet, the host stage and the preflight (`--tags host,preflight`) after a --check of the bare hosts:
- `good` holds a daemon.json with a key of the admin's; it goes from nothing to a host that passes its preflight:
  docker.io from Debian's archive, its own daemon started through the distribution's init script, the NVIDIA
  Container Toolkit from an apt repository the test makes (a STAND-IN package whose nvidia-container-runtime is
  runc; signed with a throwaway key, served on the hosts' lan, pinned by host_nvidia_key_fingerprint), the nvidia
  runtime registered by a reload (its engine, llama.cpp on the CPU with replayed GPUs for the preflight, runs
  through that runtime in the fleet test);
- `badjson` holds an invalid daemon.json: E_DAEMON_JSON, the file untouched, nothing installed;
- `badkey` pins another key's fingerprint: E_APT_KEY, nothing installed.
Reached as `nosudo` (no sudo), a host stops at validation with E_BECOME, named, and no Python traceback.

Then the same three hosts are the SSH fleet behind one router (issues 24 and 25): the two refused hosts
mended, hosts that differ (issue 38 item 1: the weights from the stand-in hub on two, fetched once and copied
over rsync, burn-in weights on the third), the llama.cpp image built on one host and carried through the
workstation to the others, llama.cpp tuned once per model, vllm-router behind its
nginx front on `good` (HTTPS there: llm_tls on that host alone), client keys at every front, each engine on its
host's nvidia runtime, a data-root move under a foreign container refused
(E_DOCKER_RESTART naming it), and what the router must do: every host served, the admin paths refused, a host
stopped or failed left out, the policies by mechanism, a roll under load with and without the drain; and
the whole life of the fleet with its secrets (the API key from Ansible Vault, every run at -vvv, the
failure paths, a restart with a new key, remove), every form of every secret then looked for in the
output, the files on the workstation and on the hosts, and the containers' inspect output.
"""
import collections
import datetime
import functools
import hashlib
import http.client
import http.server
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils import engines as engine_profiles
from ansible_collections.gpuserve.llm.plugins.module_utils.engines import prom_total
from ansible_collections.gpuserve.llm.plugins.module_utils.port_owner import listeners
import front_fuzz
from fleet_client import HeldOnLeave, StreamLoad, multiturn, one_host_per_conversation, share, tls_context, trust, untrust
from conftest import (BIN, ROOT, SCENARIOS, TESTS, Result, _double, children_cpu, docker, files_bytes, host_requirements,
                      measured, task_results, vaulted, vaulted_dict)
from outsider import Outsider
from secret_search import find_secrets
from ssh_hosts import HostNetworks, SSHHosts
# repo_dir is the stand-in hub's fixture, used by name.
from test_weights_hub import HUB, TOKEN, StandIn, repo_dir, wanted_bytes  # noqa: F401 pylint: disable=unused-import

VERSION = "1.18.2-1"  # the stand-in toolkit's, as the role's default pins it
TOOLKIT = ["nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1"]
PORT = 18241
FOREIGN_JSON = {"log-opts": {"max-size": "10m", "max-file": "3"}}
BROKEN_JSON = '{"log-opts": {"max-size": "10m"},\n'
# The throwaway key's fingerprint is made per run; this one is another key's (tests/fixtures/openpgp).
OTHER_FPR = "573459946DA26B721CAE2379DEA9DC2B5C20C98F"

# TEST PLUMBING, not the collection's: Debian's /etc/init.d/docker (docker.io 20.10) runs `ulimit -n 1048576`
# under `set -e`, over this sandbox's hard limit, so it cannot start dockerd here. The test host gets this
# script in its place through dpkg-divert before the package installs (the package's own goes to
# /etc/init.d/docker.distrib): the same start-stop-daemon call without the ulimit, with the flags a daemon
# sharing the machine's network namespace needs. The role drives it as the distribution's service.
INIT_SCRIPT = r"""#!/bin/sh
# gpuserve.llm test plumbing (tests/integration/test_host_play.py): Debian's init script minus its ulimit.
PIDFILE=/var/run/docker-ssd.pid
OPTS="-p /var/run/docker.pid --bridge=none --iptables=false --ip-masq=false --ip6tables=false"
case "$1" in
  start)
    start-stop-daemon --start --background --no-close --oknodo --exec /usr/sbin/dockerd --pidfile "$PIDFILE" \
      --make-pidfile -- $OPTS >> /var/log/docker.log 2>&1 ;;
  stop)
    start-stop-daemon --stop --oknodo --pidfile "$PIDFILE" --retry 20 && rm -f "$PIDFILE" ;;
  restart|force-reload)
    "$0" stop && "$0" start ;;
  status)
    if start-stop-daemon --status --pidfile "$PIDFILE"; then echo "docker is running"; exit 0; fi
    echo "docker is not running"; exit 3 ;;
  *)
    echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
"""
# runc's cgroup v1 controllers are mounted read-only in the container: made writable (the spike's recipe).
CGROUPS_RW = ("awk '$5 ~ \"^/sys/fs/cgroup\" {print $5}' /proc/self/mountinfo | sort -u | "
              "while read -r m; do mount -o remount,bind,rw \"$m\" || exit 1; done")


def run(argv, **kwargs):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=True, **kwargs)


def write_in(docker_host, host, command, text):
    """`command` in the host with `text` on its standard input (test plumbing)."""
    return run(["docker", "-H", docker_host, "exec", "-i", host, "sh", "-c", command], input=text)


@pytest.fixture(scope="module")
def host_networks(docker_host):
    """The hosts' lan and backend (tests/integration/ssh_hosts.py HostNetworks): a network namespace each."""
    with HostNetworks(docker_host, "gpuserve-test-fleet-%d" % os.getpid()) as nets:
        yield nets


@pytest.fixture
def hub(repo_dir, host_networks):  # pylint: disable=redefined-outer-name
    """The stand-in hub (test_weights_hub.py), served where the hosts reach the machine: its lan address."""
    stand_in = StandIn(repo_dir, TOKEN, bind=host_networks.gateway["lan"])
    yield stand_in
    stand_in.proc.terminate()
    stand_in.proc.wait()


@pytest.fixture(scope="module")
def apt_repo(tmp_path_factory, host_networks):
    """NVIDIA's flat repository's layout (libnvidia-container/stable/deb/<arch>, its key at
    libnvidia-container/gpgkey), holding STAND-IN toolkit packages, signed with a throwaway key and
    served at the machine's address on the hosts' lan. Yields (the mirror's URL, the key's fingerprint)."""
    top = tmp_path_factory.mktemp("apt-mirror")
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    repo = top / "libnvidia-container" / "stable" / "deb" / arch
    repo.mkdir(parents=True)
    build = tmp_path_factory.mktemp("debs")
    for name in TOOLKIT:
        root = build / name
        (root / "DEBIAN").mkdir(parents=True)
        depends = "\nDepends: nvidia-container-toolkit-base (= %s), libnvidia-container-tools (= %s)" % (
            VERSION, VERSION) if name == "nvidia-container-toolkit" else ""
        (root / "DEBIAN" / "control").write_text(
            "Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: gpuserve.llm tests <tests@gpuserve.invalid>\n"
            "Description: STAND-IN of NVIDIA's %s for gpuserve.llm's tests%s\n" % (name, VERSION, name, depends))
        if name == "nvidia-container-toolkit":
            runtime = root / "usr" / "bin" / "nvidia-container-runtime"
            runtime.parent.mkdir(parents=True)
            # The test bed's `nvidia` runtime is runc too: containers run on the CPU.
            runtime.write_text("#!/bin/sh\n# STAND-IN of the NVIDIA container runtime: plain runc.\n"
                               "exec /usr/sbin/runc \"$@\"\n")
            runtime.chmod(0o755)
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(repo / ("%s_%s_all.deb" % (name, VERSION)))])
    stanzas = []
    for deb in sorted(repo.glob("*.deb")):
        data = deb.read_bytes()
        control = run(["dpkg-deb", "-f", str(deb)]).stdout.strip()
        stanzas.append("%s\nFilename: ./%s\nSize: %d\nSHA256: %s\n" % (
            control, deb.name, len(data), hashlib.sha256(data).hexdigest()))
    packages = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(packages)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%a, %d %b %Y %H:%M:%S UTC")
    (repo / "Release").write_text("Origin: gpuserve-tests\nLabel: stand-in NVIDIA container toolkit\nDate: %s\n"
                                  "SHA256:\n %s %d Packages\n" % (date, hashlib.sha256(packages).hexdigest(),
                                                                  len(packages)))
    home = tmp_path_factory.mktemp("gnupg")
    home.chmod(0o700)
    env = dict(os.environ, GNUPGHOME=str(home))
    run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "gpuserve host stage test <host@gpuserve.invalid>",
         "ed25519", "sign", "never"], env=env)
    fpr = [line.split(":")[9] for line in run(["gpg", "--with-colons", "--list-keys"], env=env).stdout.splitlines()
           if line.startswith("fpr:")][0]
    run(["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--local-user", fpr, "--clearsign",
         "--output", str(repo / "InRelease"), str(repo / "Release")], env=env)
    (top / "libnvidia-container" / "gpgkey").write_text(run(["gpg", "--armor", "--export", fpr], env=env).stdout)
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(top))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer((host_networks.gateway["lan"], 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield "http://%s:%d" % server.server_address[:2], fpr
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def bare_hosts(docker_host, tmp_path_factory, host_networks):
    """Three bare test hosts (the test-host image: python3, python3-venv, sshd, sudo; no Docker), started
    the way the spike found a Docker daemon can run inside one, each with its sshd, each in a network
    namespace of its own on the lan and the backend. Yields the SSHHosts (`.short`: {short name: container},
    `.address`: {container: {"lan": address, "backend": address}})."""
    image = os.environ.get("GPUSERVE_TESTHOST_IMAGE") or run(
        [os.path.join(TESTS, "testbed", "images.sh")], env=dict(os.environ, DOCKER_HOST=docker_host)).stdout.strip()
    tag = "gpuserve-test-host-%d" % os.getpid()
    names = {n: "%s-%s" % (tag, n) for n in ("good", "badjson", "badkey")}
    run_args = ["--cap-add", "ALL", "--cap-drop", "SYS_RESOURCE", "--security-opt", "seccomp=unconfined",
                "--security-opt", "apparmor=unconfined", "-v", "{name}:/var/lib/docker"]
    # The NVML double's scenario where it looks when no variable names one (an SSH session does not
    # inherit the container's environment): /etc/nvml-replay.json, with its `extends` resolved.
    scenario = json.dumps(_double().load_scenario(os.path.join(SCENARIOS, "rtxpro6000x4-healthy.json")))
    with SSHHosts(docker_host, tmp_path_factory.mktemp("ssh-hosts"), image, list(names.values()), host_networks,
                  run_args, volumes=["{name}"]) as hosts:
        for name in names.values():
            write_in(docker_host, name, "cat > /etc/nvml-replay.json", scenario)
        good, bad = names["good"], names["badjson"]
        # Each host can run its own Docker daemon: the two refused here are mended and brought up by the fleet test.
        for name in names.values():
            docker(docker_host, "exec", name, "sh", "-c", CGROUPS_RW)
            write_in(docker_host, name, "dpkg-divert --quiet --local --rename --divert /etc/init.d/docker.distrib "
                     "--add /etc/init.d/docker && mkdir -p /etc/init.d /etc/docker && cat > /etc/init.d/docker && "
                     "chmod 755 /etc/init.d/docker", INIT_SCRIPT)
        write_in(docker_host, good, "cat > /etc/docker/daemon.json", json.dumps(FOREIGN_JSON))
        write_in(docker_host, bad, "mkdir -p /etc/docker && cat > /etc/docker/daemon.json", BROKEN_JSON)
        hosts.short = names
        yield hosts


CAPABILITIES = {0: "CHOWN", 1: "DAC_OVERRIDE", 2: "DAC_READ_SEARCH", 3: "FOWNER", 4: "FSETID", 5: "KILL", 6: "SETGID",
                7: "SETUID", 8: "SETPCAP", 10: "NET_BIND_SERVICE", 12: "NET_ADMIN", 13: "NET_RAW", 18: "SYS_CHROOT",
                21: "SYS_ADMIN", 27: "MKNOD", 29: "AUDIT_WRITE", 31: "SETFCAP"}


def capabilities(status, field):
    """The named capabilities of a /proc/PID/status capability field (CapEff, CapBnd)."""
    mask = int(re.search(r"^%s:\s+([0-9a-f]+)$" % field, status, re.M).group(1), 16)
    return set(CAPABILITIES.get(bit, str(bit)) for bit in range(64) if mask >> bit & 1)


def sh(docker_host, host, command):
    return docker(docker_host, "exec", host, "sh", "-c", command, check=False)


def installed(docker_host, host, package):
    """The package's installed version on the host, or None."""
    got = sh(docker_host, host, "dpkg-query -W -f '${db:Status-Status} ${Version}' %s" % package)
    return got.stdout.split()[1] if got.returncode == 0 and got.stdout.startswith("installed ") else None


def host_state(docker_host, host):
    """What the stage could have changed on a host, as one comparable text."""
    return sh(docker_host, host, "cat /etc/docker/daemon.json 2>&1; ls /etc/apt/sources.list.d /etc/apt/keyrings "
              "/var/lib/apt/lists /opt /etc/docker 2>&1; dpkg-query -W -f '${Package} ${Version}\\n' | sha256sum; "
              "getent group docker; pgrep -x dockerd").stdout


class HostFleet(object):
    """The inventory (the hosts over SSH) and ansible-playbook runs."""

    def __init__(self, workdir, docker_host, hosts, mirror, fpr, users=None, each=None, groups=None, args=(), runs=None,
                 **settings):
        """`users`: {container: the user to connect as} (default deploy, with become); `each`: {container:
        its own variables} (then badkey keeps the right fingerprint); `groups`: more inventory groups;
        `args`: given to every ansible-playbook run first; `runs`: a list each run's Result is added to;
        `settings`: variables of every host."""
        self.workdir, self.docker_host, self.hosts = workdir, docker_host, hosts
        self.args, self.runs = list(args), runs if runs is not None else []
        common = dict(
            host_apt_mirror=mirror, host_nvidia_key_fingerprint=fpr,
            host_venv_wheelhouse=os.path.join(ROOT, ".work", "wheelhouse"), host_venv_packages=host_requirements(),
            # llama.cpp on the CPU with burn-in weights; the replayed GPUs (NVML double) pass the preflight,
            # and the engine runs through the host's nvidia runtime.
            llm_engine="llamacpp", llm_gpus=[0], llm_weights="dummy", llm_model="gpuserve/tiny-llama-dummy",
            llm_model_max_context=8192, llm_context=2048, llm_max_tokens=256, llm_parallel=2, llm_dense="q4",
            llm_model_dense="q4", llm_kv="bf16", llm_drafter="off", llm_vision=False, llm_reserve_gib=0,
            llm_kv_cap_gib=0, llm_host="127.0.0.1", llm_port=PORT, llm_served_model_name="tiny",
            preflight_min_free_mib=1000, preflight_disk_checkpoint_gib=1, preflight_disk_image_gib=1,
            preflight_disk_kernels_gib=1, service_ulimits=[], autotune_llamacpp=False,
            image_debian_cache=os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(workdir / "images")))
        common.update(settings)
        users = users or dict((name, "deploy") for name in hosts.names)
        inventory = {}
        for name, user in users.items():
            inventory[name] = dict(common, **hosts.inventory_vars(name, user=user))
            inventory[name].update((each or {}).get(name, {}))
        if hosts.short["badkey"] in inventory and each is None:
            inventory[hosts.short["badkey"]]["host_nvidia_key_fingerprint"] = OTHER_FPR
        tree = {"llm_hosts": {"hosts": inventory}}
        tree.update(groups or {})
        (workdir / "hosts.yml").write_text(yaml.safe_dump(tree))

    def run(self, *args, playbook="site.yml"):
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                   DOCKER_HOST=self.docker_host, **self.hosts.env())
        env.pop("NVML_REPLAY_SCENARIO", None)
        argv = [os.path.join(BIN, "ansible-playbook"), os.path.join(ROOT, playbook), "-i",
                str(self.workdir / "hosts.yml")] + self.args + list(args)
        started, cpu = time.monotonic(), children_cpu()
        proc = subprocess.run(argv, cwd=str(self.workdir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=900, check=False)
        self.runs.append((" ".join([playbook] + list(args)),
                          Result(proc, self.workdir, timed=(started, [playbook] + list(args), cpu))))
        return self.runs[-1][1]


def ask(url, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        return json.loads(r.read())


def test_a_user_without_sudo_stops_with_e_become_naming_the_host(bare_hosts, docker_host, tmp_path):
    """`nosudo` connects (its key is authorized) but cannot become root: E_BECOME for the host, what
    needs root and how to fix it, no Python traceback; nothing on the host changes."""
    host = bare_hosts.short["badkey"]
    fleet = HostFleet(tmp_path, docker_host, bare_hosts, "http://127.0.0.1:9", OTHER_FPR, users={host: "nosudo"})
    before = host_state(docker_host, host)
    got = fleet.run()
    assert got.rc != 0, got
    assert "Traceback" not in got.output, got
    assert got.says("E_BECOME [error] %s" % host), got
    assert got.says("nosudo cannot become root on %s" % host), got
    assert got.says("passwordless sudo") and got.says("installing packages"), got
    assert got.codes(host) == ["E_BECOME"], got
    assert host_state(docker_host, host) == before


@pytest.mark.skipif(shutil.which("gpg") is None, reason="gpg signs the test's apt repository (tests/run.sh installs it)")
def test_bare_hosts_check_then_the_host_stage_and_the_refused_hosts_untouched(bare_hosts, apt_repo, docker_host, tmp_path):
    started = time.monotonic()
    mirror, fpr = apt_repo
    good, badjson, badkey = bare_hosts.short["good"], bare_hosts.short["badjson"], bare_hosts.short["badkey"]
    fleet = HostFleet(tmp_path, docker_host, bare_hosts, mirror, fpr)
    before = dict((h, host_state(docker_host, h)) for h in bare_hosts.names)

    # --check on the bare hosts (the host stage and the preflight; the later stages' own --check is the fleet
    # test's): every package, file, start and reload listed; nothing changes.
    check = fleet.run("--check", "--diff", "--tags", "host,preflight")
    assert check.rc != 0, check
    assert dict((h, host_state(docker_host, h)) for h in bare_hosts.names) == before, check
    for line in ["install docker.io", "install nvidia-container-toolkit %s" % VERSION, "install runc",
                 "install nvidia-container-toolkit-base %s" % VERSION, "install rsync",
                 "would start the Docker daemon once docker.io is installed", '"live-restore": true',
                 '"nvidia-container-runtime"']:
        assert check.says(line), (line, check)
    assert check.codes(badjson) == ["E_DAEMON_JSON"] and check.codes(badkey) == ["E_APT_KEY"], check
    assert "E_DOCKER" in check.codes(good), check  # no daemon yet: a real run installs and starts one
    check_s = time.monotonic() - started

    # The real run: good gets Docker and the toolkit and passes its preflight on its own daemon (its engine goes
    # LIVE in the fleet test below); the other two stop with their codes, changed nothing.
    first = fleet.run("--tags", "host,preflight")
    assert first.rc != 0 and first.recap[good]["failed"] == 0, first
    # The SSH hosts have no sysfs device for the replayed GPUs: the IOMMU check says it was not made.
    assert first.codes(good) == ["W_CHECK_SKIPPED"], first
    assert first.codes(badjson) == ["E_DAEMON_JSON"], first
    assert first.says("the Docker daemon's configuration /etc/docker/daemon.json is left as it is"), first
    assert first.codes(badkey) == ["E_APT_KEY"], first
    assert first.says("has the fingerprint %s, not the pinned %s; nothing was installed" % (fpr, OTHER_FPR)), first
    assert sh(docker_host, badjson, "cat /etc/docker/daemon.json").stdout == BROKEN_JSON
    for host in (badjson, badkey):
        assert installed(docker_host, host, "docker.io") is None and installed(docker_host, host, "rsync") is None
        assert sh(docker_host, host, "ls /etc/apt/sources.list.d /etc/apt/keyrings 2>/dev/null").stdout.count("gpuserve") == 0
        assert host_state(docker_host, host) == before[host], host

    assert installed(docker_host, good, "docker.io") and installed(docker_host, good, "rsync")
    assert [installed(docker_host, good, p) for p in TOOLKIT] == [VERSION] * 4
    conf = json.loads(sh(docker_host, good, "cat /etc/docker/daemon.json").stdout)
    assert conf == dict(FOREIGN_JSON, **{"live-restore": True,
                                         "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}})
    info = json.loads(sh(docker_host, good, "docker info --format '{{json .}}'").stdout)
    assert info["LiveRestoreEnabled"] is True and "nvidia" in info["Runtimes"], info
    # The connecting user (not root) is in the docker group: group.yml read it without become.
    assert "deploy" in sh(docker_host, good, "getent group docker").stdout.strip().split(":")[-1].split(","), first
    # (A rerun that changes nothing on every host, the engine on the nvidia runtime and a data-root move refused
    # under a foreign container: the fleet test below, once the hosts serve.)
    measured("host stage test: --check %.0f s, first run %.0f s, in all %.0f s" % (
        check_s, time.monotonic() - started - check_s, time.monotonic() - started))


ROUTER_PORT, ROUTER_ADMIN, ROUTER_METRICS = 18250, 18251, 18252
ENGINE_PORTS = {"good": PORT, "badjson": PORT + 2, "badkey": PORT + 4}
BURN_IN = dict(llm_weights="dummy", llm_model="gpuserve/tiny-llama-dummy")  # badkey's weights in the fleet
FLEET_KEY = "sk-fleet-%d-vaulted" % os.getpid()
NEW_KEY, WRONG_KEY = "sk-fleet-%d-rotated" % os.getpid(), "sk-fleet-wrong-key-0042"
# Client keys (llm_client_keys), from Vault: checked at the fronts, never given to an engine.
CI_KEY, CLIENT_KEY = "sk-client-ci-%d-vaulted" % os.getpid(), "sk-client-new-%d-vaulted" % os.getpid()
OLD_KEY = "sk-client-old-%d-vaulted" % os.getpid()
WRONG_TOKEN = "hf_refused_fleet_token_0042"
NO_ENGINE = "gpuserve-test/no-engine:1"


def call(method, url, key=None, body=None, timeout=30):
    """(status, text) of one request; (None, the error) when nothing answers. An https:// front is verified
    with the collection's CA (fleet_client.trust)."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls_context()) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return None, str(e)


IN_HOST_CALL = r"""
import json, sys, urllib.error, urllib.request
method, url, body = json.load(sys.stdin)
request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
try:
    with urllib.request.urlopen(request, timeout=30) as r:
        print(json.dumps([r.status, r.read().decode()]))
except urllib.error.HTTPError as e:
    print(json.dumps([e.code, e.read().decode()]))
except OSError as e:
    print(json.dumps([None, str(e)]))
"""


SYSLOG_FILE = "/var/log/gpuserve-test-syslog"
ADDRESS_LOG = "/var/log/gpuserve-test-addresses"  # `ip -ts monitor address`: each IPv4 address added or deleted
SYSLOG_READER = """import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind("/dev/log")
os.chmod("/dev/log", 0o666)
with open("%s", "ab", 0) as f:
    while True:
        data = s.recv(65536)
        f.write(time.strftime("%%H:%%M:%%S ").encode() + data.rstrip(b"\\0\\n") + b"\\n")
""" % SYSLOG_FILE


class Routers(object):
    """The routers' own listeners (admin, metrics), on each router host's loopback: read there, as the plays read
    them (python3 in the host through docker exec; no client reaches them)."""

    def __init__(self, docker_host, hosts):
        self.docker_host, self.hosts = docker_host, list(hosts)

    def call(self, method, port, path, body=None, host=None):
        """(status, text) of one request to 127.0.0.1:port in the host (the first router host by default); (None,
        the error) when nothing answers."""
        got = docker(self.docker_host, "exec", "-i", host or self.hosts[0], "python3", "-c", IN_HOST_CALL, check=False,
                     input=json.dumps([method, "http://127.0.0.1:%d%s" % (port, path), body]))
        if got.returncode != 0:
            return None, got.stdout  # the host is down
        return tuple(json.loads(got.stdout.strip().splitlines()[-1]))

    def workers_of(self, host):
        """The router's workers on that host (its /list_workers), None when it does not answer."""
        status, text = self.call("GET", ROUTER_ADMIN, "/list_workers", host=host)
        return sorted(json.loads(text)["urls"]) if status == 200 else None

    def workers(self):
        """The routers' workers when they all hold the same (each router knows every worker); else {host: its}."""
        seen = dict((h, self.workers_of(h)) for h in self.hosts)
        first = seen[self.hosts[0]]
        return first if all(w == first for w in seen.values()) else seen

    def requests(self):
        """Each router's own count of the requests it took, by route (its Prometheus port)."""
        found = {}
        for host in self.hosts:
            status, text = self.call("GET", ROUTER_METRICS, "/metrics", host=host)
            assert status == 200, (host, status, text[:200])
            found.update(("%s %s" % (host, k), v) for k, v in
                         re.findall(r"^(vllm_router_requests_total\{[^}]*\}) (\S+)$", text, re.M))
        return found

    def capture_syslog(self, host=None):
        """A system log for keepalived's own lines in each router host (TEST PLUMBING: the hosts run no syslog
        daemon, and keepalived logs there only): /dev/log read into SYSLOG_FILE, and the addresses added and deleted
        into ADDRESS_LOG (what took the address away, when keepalived reacts to a deletion), until the host stops."""
        for h in [host] if host else self.hosts:
            sh(self.docker_host, h, "rm -f /dev/log; nohup python3 -c %s >/dev/null 2>&1 & nohup ip -ts -4 monitor "
               "address >> %s 2>&1 </dev/null &" % (shlex.quote(SYSLOG_READER), ADDRESS_LOG))

    def log(self):
        """{router host: the lines of its keepalived check's log (check.log: each verdict that changed, each check
        that could not tell, each state keepalived entered), then keepalived's own (the system log)}; [] for a host
        that is down."""
        return dict((h, sh(self.docker_host, h, "cat /var/lib/gpuserve/router/check.log 2>/dev/null; grep -a "
                           "Keepalived %s 2>/dev/null | sed 's/^/syslog: /'; grep -v valid_lft %s 2>/dev/null | sed 's/^/address: /'" % (
                               SYSLOG_FILE, ADDRESS_LOG)).stdout.splitlines())
                    for h in self.hosts)

    def since(self, before):
        """{router host: the lines logged since `before` (a log())}, the hosts that logged any."""
        found = {}
        for host, lines in self.log().items():
            old, new = collections.Counter(before.get(host, [])), []
            for line in lines:
                if old[line] > 0:
                    old[line] -= 1
                else:
                    new.append(line)
            if new:
                found[host] = new
        return found

    def holder(self, address):
        """The router hosts that hold `address` now (their interfaces, read in each; a host that is down holds
        nothing)."""
        return [h for h in self.hosts if " %s/" % address in sh(self.docker_host, h, "ip -o -4 addr show").stdout]


def vrrp_changed(said):
    """Whether the router hosts' check logs (Routers.since()) say a host gave the address up, or keepalived took it
    or entered FAULT (a move, or one ready to happen)."""
    return any(" gives the address up: " in line or " is MASTER now" in line or " is FAULT now" in line
               for lines in said.values() for line in lines)


def faults_at_once(said):
    """The moments (check.log's stamps) at which every router host in `said` (Routers.since()) was in keepalived's
    FAULT state: none held the address or could take it."""
    events = sorted((line.split(" ", 1)[0], host, line.endswith(" is FAULT now"))
                    for host, lines in said.items() for line in lines
                    if re.match(r"\S+Z keepalived: this host is (FAULT|BACKUP|MASTER) now$", line))
    in_fault, found = set(), []
    for stamp, host, fault in events:
        (in_fault.add if fault else in_fault.discard)(host)
        if len(in_fault) > 1 and in_fault >= set(said):
            found.append(stamp)
    return found


def masters(said):
    """The router hosts that took the address, in the order their checks logged it (Routers.since())."""
    return [h for h, lines in said.items() for line in lines if line.endswith(" is MASTER now")] or "none logged"


def first_answer(url, key, since, timeout=30, each=10):
    """(seconds from `since` (time.monotonic()) until the first short chat request at `url` was answered 200,
    the seconds that request took). A new request starts every 0.1 s, each in its own thread and given `each` s,
    as many clients would ask: one asked while the address moved waits on its own connection (a SYN to a host
    that is gone is sent again only after 1 s, then 3 s), which says how long that client waited, not when the
    address answered again."""
    answered, lock, done = [], threading.Lock(), threading.Event()

    def probe():
        begun = time.monotonic()
        status, _text = call("POST", url + "/v1/chat/completions", key, {
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}, timeout=each)
        ended = time.monotonic()
        if status == 200:
            with lock:
                answered.append((ended - since, ended - begun))
            done.set()

    deadline = time.monotonic() + timeout
    while not done.wait(0.1) and time.monotonic() < deadline:
        threading.Thread(target=probe, daemon=True).start()
    with lock:
        if not answered:
            raise AssertionError("nothing answered at %s within %d s" % (url, timeout))
        return min(answered)


def after_move(outcomes, moved_at):
    """(failed among the requests started after `moved_at`, those before it that failed: the streams cut)."""
    later = [reason for started, _ended, reason in outcomes if started >= moved_at]
    cut = [reason for started, _ended, reason in outcomes if started < moved_at and reason is not None]
    return [r for r in later if r is not None], cut


def restart_host(docker_host, hosts, host):
    """A host whose container was stopped, started again as a machine boots: its cgroups writable, sshd, its
    Docker daemon and keepalived by their init scripts (the containers on its daemon restart by their policies)."""
    docker(docker_host, "start", host)
    docker(docker_host, "exec", host, "sh", "-c", CGROUPS_RW + " && find /run -name '*.pid' -delete")  # as a boot
    hosts.start_sshd(host)
    docker(docker_host, "exec", host, "sh", "-c", "/etc/init.d/docker start && /etc/init.d/keepalived start")


def host_listeners(docker_host, host, ports, workdir):
    """{port: the addresses it listens on, space-separated} in the host's own network namespace: `ss -ltn`'s view
    there, its /proc/net/tcp and tcp6 read out of band and handed to port_owner.listeners."""
    proc = workdir / ("proc-" + host)
    (proc / "net").mkdir(parents=True, exist_ok=True)
    for name in ("tcp", "tcp6"):
        (proc / "net" / name).write_text(docker(docker_host, "exec", host, "cat", "/proc/net/" + name).stdout)
    return dict((p, " ".join(sorted(s["address"] for s in listeners(str(proc), p)))) for p in ports)


def host_files_bytes(docker_host, host, paths):
    """{host:path: bytes} of every file under those of `paths` the host has (read out of band: tar through
    docker exec; binary files too)."""
    got = subprocess.run(["docker", "-H", docker_host, "exec", host, "sh", "-c", "tar --warning=no-file-changed "
                          "--warning=no-file-removed -cf - $(ls -d %s 2>/dev/null)" % " ".join(paths)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    assert got.returncode in (0, 1), got.stderr  # 1: a file (a log) changed while it was read
    out = {}
    with tarfile.open(fileobj=io.BytesIO(got.stdout)) as tar:
        for member in tar:
            if member.isfile():
                out["%s:/%s" % (host, member.name)] = tar.extractfile(member).read()
    return out


@pytest.fixture
def outsider(docker_host, bare_hosts):
    """Another machine on the hosts' lan (tests/integration/outsider.py): a client of the fleet."""
    with Outsider(docker_host, bare_hosts.image, network=bare_hosts.networks.name["lan"]) as out:
        yield out


@pytest.fixture
def trusting():
    """The test's clients trust the collection's CA once it calls trust(); the system's CAs again after it."""
    yield trust
    untrust()


def test_the_fleet_over_ssh_behind_one_router(bare_hosts, apt_repo, hub, docker_host, tmp_path, trusting,
                                              outsider):
    """The three hosts over SSH, each with its own Docker daemon, behind one router (vllm-router behind an
    nginx front, on `good`): the two refused above mended, site.yml brings all three LIVE - two on the hub's
    weights (one fetching, the other copying from it), badkey on burn-in weights - and the fleet endpoint LIVE
    (3 of 3), each host saying where its weights, its image and its tuning came from; the router host's two
    fronts on HTTPS by the collection's CA (llm_tls on that host alone); requests through it reach every host;
    the fronts take client keys (llm_client_keys) and put the engines' own key in their place, one key added
    and one revoked under a stream with no engine restarted; the router's admin paths are refused on the
    public port; a host stopped leaves the router first and the router serves on; a rerun changes nothing and
    --check changes nothing; a roll under load fails no request with the drain and fails some without it (the
    control); cache_aware keeps a conversation on one host where round_robin spreads it; stop.yml on every host
    takes the router down too, remove.yml removes it.

    And the whole life of the fleet with its secrets: the hub token, the API key and the client keys from
    Ansible Vault, every run at -vvv, the failure paths (a refused token: E_AUTH; a wrong client key:
    E_ENDPOINT; an engine that fails its health gate: E_HEALTH, the old one started again), a stop keeping the
    log and what the engine was started with, a restart with a new key; then every form of every secret is
    looked for in Ansible's output, every file the runs wrote on the workstation and on the hosts, and every
    container's inspect output but the engine's environment (the one place the key must be)."""
    started = time.monotonic()
    mirror, fpr = apt_repo
    short = bare_hosts.short
    good, badjson, badkey = short["good"], short["badjson"], short["badkey"]
    write_in(docker_host, badjson, "cat > /etc/docker/daemon.json", json.dumps(FOREIGN_JSON))  # the admin mends it
    # Each host in a network namespace of its own: its front on llm_port at its lan address (badjson's on every
    # address), its engine at its backend address on llm_port + 10000 (the router's workers, reached over the
    # backend; a client on the lan has no route there). The router host's fronts (its engine's and the fleet's)
    # serve HTTPS with the collection's CA (llm_tls on good alone: a fleet whose hosts differ); the other two
    # plain HTTP.
    lan = dict((k, bare_hosts.address[short[k]]["lan"]) for k in ENGINE_PORTS)
    private = dict((k, bare_hosts.address[short[k]]["backend"]) for k in ENGINE_PORTS)
    fronts = dict((short[k], "%s://%s:%d" % ("http" if k == "badkey" else "https", lan[k], p))
                  for k, p in ENGINE_PORTS.items())
    engines = dict((short[k], "http://%s:%d" % (private[k], p + 10000)) for k, p in ENGINE_PORTS.items())
    # good and badjson are the router hosts (issue 40): one address, router_vip, held by one through VRRP.
    routers = Routers(docker_host, [good, badjson])
    routers.capture_syslog()
    vip = bare_hosts.networks.address("lan", 250)

    def inventory(**badkey_vars):
        """The fleet's inventory (hosts.yml), badkey's own variables added: badkey serves burn-in weights, the
        others the stand-in hub's, so that every cross-host lookup meets a host without the others' variables
        (issue 38 item 1)."""
        each = dict((short[k], dict(llm_port=p, llm_host=lan[k], llm_engine_host=private[k],
                                    weights_peer_address=private[k])) for k, p in ENGINE_PORTS.items())
        each[badkey].update(BURN_IN, **badkey_vars)
        each[good].update(llm_tls=True)
        each[badjson].update(llm_tls=True, llm_host="0.0.0.0")  # the role's default
        return HostFleet(tmp_path, docker_host, bare_hosts, mirror, fpr, each=each, args=["-vvv"] + vault + client,
                         runs=runs, **fleet_vars)

    runs = []
    # The engines' (internal) key and the client keys (issue 36), both from Vault: the fronts check a client's key
    # and put the internal key in its place; no client holds the internal key.
    vault = vaulted(tmp_path, "llm_api_key", FLEET_KEY)
    client = vaulted_dict(tmp_path, "keys-ci-old.yml", "llm_client_keys", {"ci": CI_KEY, "old": OLD_KEY})

    # Weights from the stand-in hub on good and badjson (one download, the other over rsync), burn-in weights on
    # badkey; llama-bench's grid kept small. The image built on one host, saved, carried through the workstation
    # and loaded on the others.
    fleet_vars = dict(HUB)
    fleet_vars.update(llm_gpus=[0], weights_hf_endpoint=hub.url, weights_rsync_port=18799, llm_parallel=2,
                      image_distribute="workstation",
                      autotune_llamacpp=True, autotune_llamacpp_threads=[1], autotune_llamacpp_batch_sizes=[256, 512],
                      autotune_llamacpp_ubatch_sizes=[128], autotune_llamacpp_n_prompt=128,
                      autotune_llamacpp_n_gen=16, autotune_llamacpp_repetitions=1)
    fleet_vars.update(
        groups={"llm_routers": {"hosts": {good: None, badjson: None}}}, router_vip=vip,
        router_port=ROUTER_PORT, router_admin_port=ROUTER_ADMIN,
        router_metrics_port=ROUTER_METRICS, router_policy="round_robin", router_health_check_interval_secs=2,
        router_cache_dir=os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images")),
        # One thread a CPU engine, and a quarter of a core (service_cpus): under the streams below an engine
        # would take a whole core of the two while it generates (~1,000 tokens/s of this model), leaving Ansible
        # one; held to 0.25 it still streams ~250 tokens/s, every stream still in flight when a host leaves.
        service_threads=1, service_cpus=0.25, service_warm_concurrency=[], service_warm_prompt_tokens=0, llm_max_tokens=2048,
        # verify and bench kept short: each host once, then the fleet endpoint (the router picks the hosts)
        verify_checks=["concurrent_solo"], verify_fleet_checks=["concurrent_solo", "tool_calls", "json_response_format"],
        verify_exact_prompts=3, verify_tool_calls=4, verify_json_response_format=4, verify_progress_interval=5,
        bench_concurrency=[1, 3], bench_kinds=["prose"], bench_reply_tokens=16, bench_prefill_sizes=[256],
        bench_reuse_turns=2, bench_reuse_tokens=256, bench_repeats=1, bench_warmup=False, bench_progress_interval=5)
    fleet = inventory()
    front = "https://%s:%d" % (vip, ROUTER_PORT)
    # Batches of one host (service_serial's 25 % of three) are the roll's and the rerun's (below): the runs that
    # start the fleet, --check and the preflight failure take the service play in one batch.
    one_batch = ["-e", "service_serial=100%"]

    def chat(key=CI_KEY, tokens=8):
        return call("POST", front + "/v1/chat/completions", key,
                    {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens})

    # A refused token stops the weights stage with E_AUTH, nothing fetched.
    refused = fleet.run("--tags", "weights", "--limit", good, "-e", "llm_hf_token=" + WRONG_TOKEN)
    assert refused.rc != 0 and refused.says("E_AUTH"), refused
    assert refused.says("the token given (llm_hf_token) was refused"), refused
    assert hub.file_bytes() == 0

    live = fleet.run(*one_batch)
    assert live.rc == 0, live
    for name in (good, badjson):
        assert live.says("acme/tiny-chat-GGUF is now LIVE! on port %s" % fronts[name].rsplit(":", 1)[1]), (name, live)
    assert live.says("gpuserve/tiny-llama-dummy is now LIVE! on port %s (dummy weights)"
                     % fronts[badkey].rsplit(":", 1)[1]), live
    for name in (good, badjson, badkey):
        assert json.loads(sh(docker_host, name, "docker info --format '{{json .LiveRestoreEnabled}}'").stdout) is True
    report = live.report()
    assert [report[n]["weights"] for n in (good, badjson, badkey)] == ["hub", "hub", "dummy"], report
    # The play's hosts in the inventory's order (by name): the first hub host is the seed. The image's origin is
    # the first host that has it (good, from the test before, when the file runs whole).
    seed = min(good, badjson)
    # The weights fetched once from the hub (one download's bytes at the source: the other hub host copied them
    # over rsync from the seed; badkey made its burn-in weights); llama.cpp tuned once per model: the seed tuned
    # for the hub's, its copier took that result, badkey tuned for its own.
    assert hub.file_bytes() == wanted_bytes(hub), hub.control("/_stats")["by_path"]
    assert live.says("fetches 0.01 GiB (%d bytes) in 2 of 2 files from %s" % (wanted_bytes(hub), hub.url)), live
    assert live.says("fetches 0.01 GiB (%d bytes) in 2 of 2 files from %s over rsync" % (wanted_bytes(hub), seed)), live
    assert live.says("gpuserve/tiny-llama-dummy: dummy weights - "), live
    assert TOKEN not in live.output
    ids = set(sh(docker_host, n, "docker inspect -f '{{.Image}}' $(docker ps -q --filter label=gpuserve.llm.service)")
              .stdout.strip() for n in engines)
    assert len(ids) == 1, ids  # one image across the fleet
    flat = " ".join(live.output.split())
    loaded = dict(re.findall(r"\[([^\]]+)\] => msg: \S+ is \S+ \(loaded from the copy saved on ([^)\s]+)\)", flat))
    origins = set(loaded.values())
    assert len(loaded) == 2 and len(origins) == 1 and origins == set(engines) - set(loaded), loaded
    sources = re.findall(r"takes (\S+) from (\S+)", live.output)
    tuned = set(re.findall(r"\btunes ([0-9a-f]{16}) \(", flat))
    assert len(sources) == 1 and sources[0][1] == seed and len(tuned) == 2 and sources[0][0] in tuned, (sources, tuned)
    assert live.says("fleet endpoint %s/v1 is now LIVE (3 of 3 hosts)" % front), live
    assert routers.workers() == sorted(engines.values())
    # TLS at the router host's two fronts, by the CA the run made on the workstation: a client that trusts it
    # gets in, one that does not is refused at the handshake, plain HTTP is refused; the others serve plain HTTP.
    ca = tmp_path / ".gpuserve" / "tls" / "ca.crt"
    assert live.says("TLS by the collection's CA (clients trust %s), plain HTTP refused" % ca), live
    assert live.says("2 client key(s)") and not live.says("W_SHARED_KEY"), live
    untrusted = call("GET", front + "/health")  # the system's CAs do not know the collection's
    assert untrusted[0] is None and "CERTIFICATE_VERIFY_FAILED" in untrusted[1], untrusted
    trusting(str(ca))
    assert call("GET", front + "/health")[0] == 200 and call("GET", fronts[good] + "/health")[0] == 200
    plain = call("GET", "http://%s:%d/v1/models" % (vip, ROUTER_PORT), CI_KEY)
    assert plain[0] == 400 and "use https://" in plain[1], plain
    assert call("GET", fronts[badjson] + "/v1/models", CI_KEY)[0] == 200
    # Engines unreachable by clients (issue 36 item 1): what listens where on each host (`ss -ltn`'s view of its
    # own network namespace), and what another machine on the lan reaches: each host's front and the fleet's,
    # and nothing else - no engine (at the host's lan address nothing listens on its port; its backend address
    # has no route from the lan), no router listener.
    for k, p in ENGINE_PORTS.items():
        seen = host_listeners(docker_host, short[k], [p, p + 10000], tmp_path)
        assert seen == {p: "0.0.0.0" if k == "badjson" else lan[k], p + 10000: private[k]}, (k, seen)
    for name in (good, badjson):
        seen = host_listeners(docker_host, name, [ROUTER_PORT, ROUTER_ADMIN, ROUTER_METRICS], tmp_path)
        assert seen == {ROUTER_PORT: "0.0.0.0", ROUTER_ADMIN: "127.0.0.1", ROUTER_METRICS: "127.0.0.1"}, (name, seen)
    asks = []
    for k, p in ENGINE_PORTS.items():
        asks += [("http", lan[k], p + 10000, "GET", "/health", None), ("http", private[k], p + 10000, "GET", "/health", None)]
    asks += [("http", lan[k], p, "GET", "/health", None) for k in ("good", "badjson") for p in (ROUTER_ADMIN, ROUTER_METRICS)]
    asks += [("https", vip, ROUTER_PORT, "GET", "/v1/models", CI_KEY),
             ("https", vip, ROUTER_PORT, "GET", "/v1/models", None),
             ("https", vip, ROUTER_PORT, "GET", "/list_workers", CI_KEY),
             ("http", vip, ROUTER_PORT, "GET", "/v1/models", CI_KEY),
             ("https", lan["good"], PORT, "GET", "/v1/models", CI_KEY),
             ("https", lan["badjson"], ENGINE_PORTS["badjson"], "GET", "/v1/models", CI_KEY),
             ("https", private["badjson"], ENGINE_PORTS["badjson"], "GET", "/v1/models", CI_KEY),
             ("https", lan["badjson"], ENGINE_PORTS["badjson"], "GET", "/slots", CI_KEY),
             ("https", lan["badjson"], ENGINE_PORTS["badjson"], "GET", "/metrics", CI_KEY)]
    reached = outsider.ask(asks, cafile=str(ca))
    assert reached == ["refused", "unreachable"] * 3 + ["refused"] * 4 + [200, 401, 404, 400, 200, 200, "unreachable",
                                                                          404, 404], list(zip(asks, reached))
    print("from another machine on the lan: %s" % list(zip([a[1:5] for a in asks], reached)))
    # Each engine runs on its host's own daemon through the nvidia runtime the host stage registered, held to a
    # quarter of a core (service_cpus).
    for name in engines:
        engine = json.loads(sh(docker_host, name, "docker inspect $(docker ps -q --filter label=gpuserve.llm.service)")
                            .stdout)[0]
        assert engine["State"]["Running"] and engine["HostConfig"]["Runtime"] == "nvidia", (name, engine["HostConfig"])
        assert engine["HostConfig"]["NanoCpus"] == 250_000_000, (name, engine["HostConfig"]["NanoCpus"])
    live_s = time.monotonic() - started

    # A data-root move under a container the collection does not own is refused before daemon.json changes.
    image = sh(docker_host, good, "docker inspect -f '{{.Config.Image}}' $(docker ps -q --filter "
               "label=gpuserve.llm.service)").stdout.strip()
    assert sh(docker_host, good, "docker run -d --name foreign-job --network host %s sleep 600" % image).returncode == 0
    moved = fleet.run("--tags", "host", "--limit", good, "-e", "host_docker_data_root=/var/lib/docker-moved")
    assert moved.rc != 0, moved
    assert moved.says("E_DOCKER_RESTART [error] %s unix:///var/run/docker.sock" % good), moved
    assert moved.says("would stop 1 container(s) the collection does not own: foreign-job"), moved
    held = sorted(sh(docker_host, good, "docker image ls --format '{{.Repository}}:{{.Tag}}'").stdout.split())
    # The engine image (which the foreign container runs too: the engine names it by id), the front's and the router's.
    kinds = ("gpuserve/llama.cpp:", "gpuserve/front:", "gpuserve/vllm-router:")
    assert [any(h.startswith(kind) for h in held) for kind in kinds] == [True] * 3, held
    assert moved.says("would strand the %d image(s) the old data root holds: %s" % (len(held), ", ".join(held))), moved
    assert "data-root" not in json.loads(sh(docker_host, good, "cat /etc/docker/daemon.json").stdout)
    assert sh(docker_host, good, "docker inspect -f '{{.State.Running}}' foreign-job").stdout.split() == ["true"]
    assert sh(docker_host, good, "docker rm -f foreign-job").returncode == 0
    assert routers.workers() == sorted(engines.values())

    # Through the router: every host serves (round_robin); the fronts check the client keys, and the internal key
    # the engines hold is no client's.
    before = dict((n, _served(u)) for n, u in engines.items())
    assert [chat()[0] for _request in range(6)] == [200] * 6
    assert all(_served(u) > before[n] for n, u in engines.items()), (before, engines)
    assert chat(key=None)[0] == 401 and chat(key="sk-wrong")[0] == 401 and chat(key=FLEET_KEY)[0] == 401
    assert [call("GET", u + "/v1/models", CI_KEY)[0] for u in fronts.values()] == [200] * 3
    assert [call("GET", u + "/v1/models", FLEET_KEY)[0] for u in fronts.values()] == [401] * 3
    # /v1/responses: vllm-router 0.1.17 sends no client header on it, only its own key (the internal key, from
    # its environment): straight at the router with no key, the engine is reached past its key check (llama-server
    # 0.7.0 serves no /v1/responses: 404, where a request without the key is 401).
    status, text = routers.call("POST", ROUTER_ADMIN, "/v1/responses", {"model": "tiny", "input": "hi"})
    assert status in (200, 404), (status, text)

    # The admin endpoints are not reachable on the public port: a client's remove is refused.
    refused = call("POST", front + "/remove_worker?url=" + urllib.parse.quote(engines[badkey], safe=""))
    assert refused[0] == 404 and "not served here" in refused[1], refused
    assert call("GET", front + "/list_workers")[0] == 404
    assert routers.workers() == sorted(engines.values())
    assert call("GET", front + "/health")[0] == 200
    # The router and the fronts on the host's network hold none of Docker's default capabilities they do not need:
    # no raw socket there (NET_RAW), and nothing an exec'd program gains (no_new_privs).
    raw = sh(docker_host, good, "docker exec gpuserve-router python3 -c 'import socket; "
                                "socket.socket(socket.AF_PACKET, socket.SOCK_RAW)'")
    assert raw.returncode != 0 and "Operation not permitted" in raw.stdout, raw
    for container, wanted in (("gpuserve-router", {"NET_BIND_SERVICE"}),
                              ("gpuserve-router-front", {"CHOWN", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID"}),
                              ("gpuserve-llm-front", {"CHOWN", "KILL", "NET_BIND_SERVICE", "SETGID", "SETUID"})):
        status = sh(docker_host, good, "docker exec %s cat /proc/1/status" % container).stdout
        assert capabilities(status, "CapEff") == capabilities(status, "CapBnd") == wanted, (container, status)
        assert re.search(r"^NoNewPrivs:\s+1$", status, re.M), (container, status)
    # nginx's workers (the master's children) run as the fronts' own user, no other process's uid (nobody's).
    with open(os.path.join(ROOT, "roles", "front", "vars", "main.yml")) as f:
        worker_uid = yaml.safe_load(f)["front_worker_uid"]
    for container in ("gpuserve-router-front", "gpuserve-llm-front"):
        ids = sh(docker_host, good, "docker exec %s sh -c 'for s in /proc/[0-9]*/status; do "
                                    "grep -E \"^(PPid|Uid):\" $s | tr \"\\n\" \" \"; echo; done'" % container).stdout
        workers = set(int(u) for u in re.findall(r"PPid:\s+1\s+Uid:\s+(\d+)", ids))
        assert workers == {worker_uid}, (container, ids)

    # The generated requests, through good's front and the fleet's, with a valid client key: judged by what
    # arrived - the router's own counters and workers, the engines' counters, the fronts' upstream logs.
    routed_before, served_before = routers.requests(), dict((n, _served(u)) for n, u in engines.items())
    logs_before = dict((n, sh(docker_host, n, "docker logs gpuserve-llm-front 2>&1 | wc -l").stdout.strip())
                       for n in (good,))
    tried = front_fuzz.variants(engines[badkey])
    allowed_routes = dict(engine_profiles.PROFILES["llamacpp"]["front_routes"], **{"/health": ["GET", "HEAD"]})
    allowed = set((m, p) for p, methods in allowed_routes.items() for m in methods)
    statuses = collections.Counter()
    for base in (fronts[good], front):
        for method, path in tried:
            statuses[front_fuzz.send(base, method, path, CI_KEY, context=tls_context())] += 1
    assert sum(statuses.values()) == 2 * len(tried) >= 1000 and not [s for s in statuses if s is None or s >= 500], \
        statuses
    assert routers.requests() == routed_before, (routed_before, routers.requests())
    assert routers.workers() == sorted(engines.values())  # no /remove_worker got through
    assert dict((n, _served(u)) for n, u in engines.items()) == served_before
    for name in (good,):
        since = int(logs_before[name]) + 1
        text = sh(docker_host, name, "docker logs gpuserve-llm-front 2>&1 | tail -n +%d" % since).stdout
        # What went upstream is an allowed route under a method it takes: an escape that nginx normalises to
        # an allowed route (/v1/chat/completions/../../completions) is sent as exactly that route's path.
        went = front_fuzz.forwarded(text)
        assert text.count(" upstream=") >= len(tried) and [f for f in went if (f[0], f[3]) not in allowed] == [], went
    measured("front fuzz: %d requests through a host's front and the fleet's, answered %s; none reached the router or "
             "an engine" % (2 * len(tried), dict(statuses)))
    # Other spellings of an allowed route reach the engine as exactly that route's path.
    for path, route in front_fuzz.EQUIVALENT.items():
        assert front_fuzz.send(fronts[good], "POST", path, CI_KEY, context=tls_context()) == 200, path
    text = sh(docker_host, good, "docker logs gpuserve-llm-front 2>&1 | tail -n %d" % len(front_fuzz.EQUIVALENT)).stdout
    assert [(m, sent) for m, _asked, _status, sent in front_fuzz.forwarded(text)] == \
        [("POST", route) for route in front_fuzz.EQUIVALENT.values()], text
    # The limits: an 8 MiB body (over the cap llm_context gives) is 413 before the engine sees any of it; a
    # burst over the key's rate (front_rate_per_key 20/s, burst 40) is 429 with Retry-After.
    big = {"model": "tiny", "messages": [{"role": "user", "content": "x" * (8 << 20)}], "max_tokens": 1}
    served = _served(engines[good])
    assert call("POST", fronts[good] + "/v1/chat/completions", CI_KEY, big)[0] == 413
    assert _served(engines[good]) == served
    # The body check (front_media.js), as the role configures it: without llm_vision a host's front refuses any
    # image before the engine sees it; the fleet's front takes the fewest any host takes (front_fleet_media): the
    # router sends to the engines, not to their hosts' fronts.
    pictured = {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]}
    status, text = call("POST", fronts[good] + "/v1/chat/completions", CI_KEY, pictured)
    assert status == 400 and "1 image in one request: the model here is served without vision" in text, text
    status, text = call("POST", front + "/v1/chat/completions", CI_KEY, pictured)
    assert status == 400 and "1 image in one request: the fleet's hosts take no images or video (llm_vision is off" \
        in text, text
    assert _served(engines[good]) == served
    limited = [_status_and_retry(fronts[good] + "/v1/models", CI_KEY) for _request in range(80)]
    assert (429, "1") in limited and (200, None) in limited, collections.Counter(limited)
    # /health asks no key: a rate of its own for an address other than the host's (10/s, a burst of 20), polled
    # here on one kept connection.
    polled = _health_polls(lan["good"], ENGINE_PORTS["good"], 100)
    assert polled[429] >= 10 and polled[200] >= 20 and set(polled) == {200, 429}, polled

    # Client keys changed while a client streams through the fleet's front (issue 36): `new` added and `old`
    # revoked in one front reload (--tags front), no engine restarted, no request failed; the revoked key is
    # refused at once, the added one taken.
    serving = dict((n, sh(docker_host, n, "docker ps -q --filter label=gpuserve.llm.service").stdout.split())
                   for n in engines)
    assert chat(key=OLD_KEY)[0] == 200 and chat(key=CLIENT_KEY)[0] == 401
    client = vaulted_dict(tmp_path, "keys-ci-new.yml", "llm_client_keys", {"ci": CI_KEY, "new": CLIENT_KEY})
    checked = routers.log()
    with StreamLoad(front, CI_KEY, "tiny", concurrency=1, max_tokens=400) as load:
        time.sleep(2)
        rekeyed = fleet.run("--tags", "front", *client)
        time.sleep(1)
    streamed = load.counts()
    # What the routers' checks and keepalived said meanwhile: in the failure's message and the measured line.
    said = routers.since(checked)
    fleet = inventory()  # the new keys from here on
    assert rekeyed.rc == 0 and rekeyed.says("2 client key(s)") and rekeyed.says("reloaded"), rekeyed
    assert streamed["failed"] == 0 and streamed["completed"] > 0, (streamed, said)
    assert chat(key=CLIENT_KEY)[0] == 200 and chat(key=CI_KEY)[0] == 200 and chat(key=OLD_KEY)[0] == 401
    assert [call("GET", u + "/v1/models", OLD_KEY)[0] for u in fronts.values()] == [401] * 3
    assert [call("GET", u + "/v1/models", CLIENT_KEY)[0] for u in fronts.values()] == [200] * 3
    assert dict((n, sh(docker_host, n, "docker ps -q --filter label=gpuserve.llm.service").stdout.split())
                for n in engines) == serving  # no engine was restarted
    measured("client keys: one added and one revoked under a stream (%s), no engine restarted; the address %s (%s)" % (
        streamed, "moved or was given up" if vrrp_changed(said) else "stayed", said or "nothing logged"))

    # A reload that could not run (the front paused: Docker refuses the exec) is E_FRONT in words, and the next run
    # reloads although the files are written already: the keys of the failed run are served, not the workers' before.
    old_keys = ["--limit", good, "--tags", "front", "-e", "@" + str(tmp_path / "keys-ci-old.yml")]
    assert sh(docker_host, good, "docker pause gpuserve-llm-front").returncode == 0
    try:
        paused = fleet.run(*old_keys)
    finally:
        sh(docker_host, good, "docker unpause gpuserve-llm-front")
    assert paused.rc != 0 and paused.recap[good]["failed"] == 1 and paused.says("E_FRONT"), paused
    assert paused.says("the reload could not run in the container, which serves the configuration before"), paused
    assert [call("GET", fronts[good] + "/v1/models", k)[0] for k in (OLD_KEY, CLIENT_KEY)] == [401, 200]
    retried = fleet.run(*old_keys)
    assert retried.rc == 0 and retried.says("reloaded"), retried
    assert [call("GET", fronts[good] + "/v1/models", k)[0] for k in (OLD_KEY, CLIENT_KEY)] == [200, 401]
    # The keys the rest of this test has, back with the router stage on one router host, which keeps the Prometheus
    # targets of the hosts it did not reach and changes nothing but the fronts' keys.
    targets_file = tmp_path / "reports" / "prometheus-targets.json"
    written = targets_file.read_text()
    back = fleet.run("--limit", good, "--tags", "front,router")
    assert back.rc == 0 and [call("GET", fronts[good] + "/v1/models", k)[0] for k in (OLD_KEY, CLIENT_KEY)] == [401, 200]
    tasks = re.findall(r"(?ms)^TASK \[([^\]]*)\][^\n]*\n(.*?)(?=^TASK \[|^PLAY |\Z)", back.output)
    changed = set(task for task, body in tasks if re.search(r"changed: \[%s[] ]" % re.escape(good), body))
    assert changed and all(t.startswith("gpuserve.llm.front : ") for t in changed), changed
    assert targets_file.read_text() == written
    assert "vllm_router_" in routers.call("GET", ROUTER_METRICS, "/metrics")[1]

    # verify and bench on each host, then once more through the fleet endpoint: reports/fleet/.
    verified = fleet.run(playbook="playbooks/verify.yml")
    assert verified.rc == 0, verified
    fleet_verify = json.loads((tmp_path / "reports" / "fleet" / "verify.json").read_text())
    statuses = dict((c["name"], (c["status"], c["passed"], c["total"])) for c in fleet_verify["checks"])
    assert statuses["concurrent_solo"][0] == "pass" and statuses["tool_calls"] == ("pass", 4, 4), statuses
    assert statuses["json_response_format"][0] == "pass" and statuses["needles"][0] == "not_run", statuses
    for name in engines:
        assert (tmp_path / "reports" / name / "verify.md").exists(), name
    # The fleet's last report, as an earlier bench would have left it (one request at 0.5 tok/s, llm_parallel 1):
    # the new report shows each row against it (issue 37 item 7).
    last = {"time": "2026-01-02 03:04 UTC", "settings": {"llm_parallel": 1}, "endpoints": [
        {"name": "fleet endpoint (%s)" % vip, "prefill": [], "reuse": None,
         "decode": [{"kind": "prose", "requests": 1, "aggregate_tok_s": 0.5, "per_request_tok_s": 0.5, "ttft_ms": 1e6,
                     "repeats": 3, "range": {"aggregate_tok_s": [0.4, 0.6]}}]}]}
    (tmp_path / "reports" / "fleet" / "bench.json").write_text(json.dumps(last))
    benched = fleet.run(playbook="playbooks/bench.yml")
    assert benched.rc == 0, benched
    fleet_bench = json.loads((tmp_path / "reports" / "fleet" / "bench.json").read_text())
    [endpoint] = fleet_bench["endpoints"]
    assert endpoint["name"] == "fleet endpoint (%s)" % vip, endpoint["name"]
    assert [r["requests"] for r in endpoint["decode"]] == [1, 3], endpoint["decode"]
    assert all(r["aggregate_tok_s"] > 0 for r in endpoint["decode"]), endpoint["decode"]
    one = endpoint["decode"][0]["aggregate_tok_s"]
    change = "%+.1f %%" % round((one - 0.5) * 100 / 0.5, 1)
    assert benched.says("fleet endpoint (%s) prose x1: %s tok/s (before: 0.5, %s)" % (vip, one, change)), benched
    fleet_md = (tmp_path / "reports" / "fleet" / "bench.md").read_text()
    assert "Against this host's last report (2026-01-02 03:04 UTC)" in fleet_md and "llm_parallel 1 -> 2" in fleet_md
    # This bench times one pass a row (bench_repeats 1): better by the figure, with no spread to judge it by
    assert "| fleet endpoint (%s) | prose x1 | tok/s | 0.5 | %s | %s (better; no spread to judge by) |" % (
        vip, one, change) in fleet_md, fleet_md
    assert "| prose x3 |" not in fleet_md.split("## Before and after")[1]  # not in the last report: not compared

    targets = dict(((g["labels"]["job"], g["labels"]["gpuserve_host"]), g["targets"])
                   for g in json.loads(targets_file.read_text()))
    assert targets == dict([(("gpuserve-engines", n), [u[len("http://"):]]) for n, u in engines.items()]
                           + [(("gpuserve-router", n), ["127.0.0.1:%d" % ROUTER_METRICS]) for n in routers.hosts]), targets

    # A rerun changes nothing on any host (as users run it: the default batches); --check says nothing would change.
    again = fleet.run()
    assert again.rc == 0 and all(again.recap[h]["changed"] == 0 for h in engines), again
    # The TLS fronts' certificates, the CA's, their keys' and fresh for their names, are neither requested nor
    # signed again: skipped on both hosts, in every batch.
    for task in ("The front's certificate request", "Sign the front's certificate"):
        said = task_results(again.output, "gpuserve.llm.front : " + task)
        for name in (good, badjson):
            ran = re.search(r"(ok|changed): \[%s[] ]" % re.escape(name), said)
            assert "skipping: [%s]" % name in said and not ran, (task, said)
    check = fleet.run("--check", *one_batch)
    assert check.rc == 0 and all(check.recap[h]["changed"] == 0 for h in engines), check
    # Bad router settings stop the router host at validation, each with its code, before anything changes.
    refused = fleet.run("--limit", good, "-e", "router_port=%d" % PORT, "-e", "router_policy=fastest")
    assert refused.rc != 0 and refused.recap[good]["changed"] == 0, refused
    assert refused.says("router_port: this host is a router (llm_routers) and a worker (llm_hosts) on the same port: "
                        "router_port and llm_port are both %d; give the router another port" % PORT), refused
    assert refused.says("router_policy: router_policy is") and refused.says("allowed: one of cache_aware, round_robin"), \
        refused
    assert refused.says("E_CONFIG [error] %s router_port:" % good), refused
    assert refused.says("E_CONFIG [error] %s router_policy:" % good), refused
    assert routers.workers() == sorted(engines.values()) and chat()[0] == 200

    # An engine that fails its health gate (an image with no engine in it, put on badkey's daemon by hand):
    # E_HEALTH, the old engine started again and back in the router. A wrong client key fails verify: E_ENDPOINT.
    assert sh(docker_host, badkey, "mkdir -p /tmp/no-engine/etc && touch /tmp/no-engine/etc/broken && "
              "tar -C /tmp/no-engine -cf - etc | docker import - %s" % NO_ENGINE).returncode == 0
    serving = _service(docker_host, badkey)
    broken = fleet.run("--limit", badkey, "-e", "llm_image=" + NO_ENGINE, "-e", "autotune_llamacpp=false")
    assert broken.rc != 0 and broken.recap[badkey]["failed"] == 1, broken
    assert broken.says("E_HEALTH [error] %s " % badkey) and broken.says("passed the health gate"), broken
    assert _service(docker_host, badkey) == serving  # the same container serves; the failed one is gone
    assert call("GET", engines[badkey] + "/health")[0] == 200
    assert routers.workers() == sorted(engines.values()), broken
    wrong = fleet.run("--limit", badkey, *vaulted_dict(tmp_path, "keys-wrong.yml", "llm_client_keys", {"ci": WRONG_KEY}),
                      playbook="playbooks/verify.yml")
    assert wrong.rc != 0 and wrong.says("E_ENDPOINT"), wrong
    rerun_s = time.monotonic() - started - live_s

    # One host stopped: out of the router before its engine stops; the router serves on with the others.
    # It keeps the log and what the engine was started with, not this run's variables.
    stopped = fleet.run("--limit", badkey, "-e", "llm_parallel=9", playbook="playbooks/stop.yml")
    assert stopped.rc == 0, stopped
    [saved] = list((tmp_path / "logs" / badkey).iterdir())
    [log] = saved.glob("*.log")
    assert "listening" in log.read_text(), log.read_text()[-2000:]
    settings = json.loads((saved / "settings.json").read_text())["settings"]
    assert settings["llm_parallel"] == 2 and settings["llm_api_key"] == settings["llm_hf_token"] == "<hidden>"
    before = _service(docker_host, badkey)
    assert [running for _name, running, _config in before] == [False], before  # kept, for docker logs
    assert stopped.says("drained: "), stopped
    assert routers.workers() == sorted(u for n, u in engines.items() if n != badkey)
    assert [chat()[0] for _request in range(4)] == [200] * 4
    assert call("GET", engines[badkey] + "/health")[0] is None  # its engine is down

    # Routing by mechanism: a multi-turn workload over the two hosts under round_robin, then cache_aware.
    # The policy's change comes with a run where the stopped host fails its preflight: it stays out.
    keys = dict(api_key=CI_KEY, engine_key=FLEET_KEY, model="tiny", conversations=3, turns=3)
    two = [u for n, u in engines.items() if n != badkey]
    spread = multiturn(front, two, **keys)
    # Restarted after the stop with a new key: a new container in the other slot, the stopped one not left
    # behind, and the same configuration label (it says nothing of the key).
    rotated = fleet.run("--limit", badkey, "-e", "llm_api_key=" + NEW_KEY, playbook="playbooks/restart.yml")
    assert rotated.rc == 0 and rotated.says("is now LIVE! on port %d" % ENGINE_PORTS["badkey"]), rotated
    after = _service(docker_host, badkey)
    assert len(after) == 1 and after[0][1] and after[0][0] != before[0][0] and after[0][2] == before[0][2], after
    assert call("GET", engines[badkey] + "/v1/models", NEW_KEY)[0] == 200
    assert call("GET", engines[badkey] + "/v1/models", FLEET_KEY)[0] == 401
    checked = routers.log()
    policy = inventory(preflight_min_free_mib=10 ** 9).run("-e", "router_policy=cache_aware", *one_batch)
    assert policy.rc != 0 and policy.recap[badkey]["failed"] == 1, policy
    # Both routers are replaced for the new policy, one router host after the other: each router host's start is a
    # task of its own turn (in parallel both would be under one header), and keepalived never had both in FAULT at
    # once, so one of them could hold router_vip throughout.
    turns = [[h for h in routers.hosts if re.search(r"changed: \[%s[] ]" % re.escape(h), body)] for body in re.findall(
        r"(?ms)^TASK \[gpuserve\.llm\.router : Start the router[^\n]*\n(.*?)(?=^TASK \[|^PLAY |\Z)", policy.output)]
    assert sorted(turns) == sorted([h] for h in routers.hosts), turns
    said = routers.since(checked)
    assert faults_at_once(dict((h, said.get(h, [])) for h in routers.hosts)) == [], said
    measured("router_policy changed: the routers replaced in turns %s; keepalived's states meanwhile: %s" % (
        turns, dict((h, [line.replace("keepalived: this host is ", "").replace(" now", "") for line in said.get(h, [])
                         if " keepalived: this host is " in line]) for h in routers.hosts)))
    # The SSH hosts have no sysfs device for the replayed GPU: the IOMMU check says it was not made.
    assert policy.codes(badkey) == ["E_GPU_MEMORY", "W_CHECK_SKIPPED"], policy
    assert policy.says("the IOMMU check (W_IOMMU) was not made on GPU"), policy
    assert policy.says("out of the router: %s (failed in this run)" % badkey), policy
    assert policy.says("is now LIVE (2 of 3 hosts)"), policy
    assert routers.workers() == sorted(two)
    fleet = inventory()
    kept = multiturn(front, two, **keys)
    assert one_host_per_conversation(kept), kept
    assert not one_host_per_conversation(spread), spread
    assert share(kept) > share(spread), (kept, spread)
    measured("turns 2+ under round_robin: %s, cached %.0f%%; under cache_aware: %s, cached %.0f%%" % (
        spread["served"], 100 * share(spread), kept["served"], 100 * share(kept)))

    # A roll under load: a changed setting (the context) makes new containers, one host at a time; the
    # stopped host comes back in, its engine (started with NEW_KEY above) drained with its own key. Streams held
    # open on the host being rolled (issue 38 item 6): when the first host leaves the router, four 600-token
    # streams go to its own front (a client key), and its drain must count them and wait for them (~17 s on a
    # quarter of a core; 1,500 tokens held the roll 43 s, and the drain reads within its 2 s settle time).
    held = HeldOnLeave(lambda: routers.workers_of(good), engines, fronts, dict((n, CI_KEY) for n in engines),
                       max_tokens=600)
    checked = routers.log()
    with StreamLoad(front, CI_KEY, "tiny", concurrency=1, max_tokens=400) as load:
        held.start()
        time.sleep(2)
        roll = fleet.run("-e", "llm_context=3072", "-e", "router_policy=cache_aware")
        time.sleep(2)
    drained = load.counts()
    rolled_said = routers.since(checked)
    held_host, held_results = held.finish()
    assert roll.rc == 0 and roll.says("is now LIVE (3 of 3 hosts)"), roll
    assert roll.says("drained: "), roll
    assert re.search(r"\[%s\][^\n]*\n\s+msg: .?drained: " % re.escape(badkey), roll.output), roll
    # Each held stream completed ([DONE], not cut by the engine's stop), and the drain of their host counted
    # requests: "drained: N request(s) running when it left the router (at most M), none after ..." with M (or
    # N) >= 1. The callback's YAML folds a long msg at 80 columns: the pattern takes any white space.
    assert held_host and held_results == [None] * held.count, (held_host, held_results)
    counted = re.search(r"\[%s\][^\n]*\n\s+msg: .?drained:\s+(\d+)\s+request\(s\)\s+running\s+when\s+it\s+left"
                        r"\s+the\s+router(?:\s+\(at\s+most\s+(\d+)\))?,\s+none\s+after\s+[\d.]+\s+s"
                        % re.escape(held_host), roll.output)
    assert counted and int(counted.group(2) or counted.group(1)) >= 1, (held_host, counted and counted.group(0), roll)
    measured("held on %s as it left the router: %d streams completed; its drain: %s" % (
        held_host, len(held_results), " ".join(counted.group(0).split())))
    assert routers.workers() == sorted(engines.values())
    # The control: one host restarted without the drain (it does not leave the router) under a load of streams at
    # its own front: the ones in flight when its engine stops are cut. --tags service: the stage that restarts
    # and drains (the router and host stages would only repeat the roll's ~200 tasks).
    with StreamLoad(fronts[badjson], CI_KEY, "tiny", concurrency=2, max_tokens=400) as load:
        time.sleep(2)
        control = fleet.run("--limit", badjson, "--tags", "service", "-e", "llm_context=3072",
                            "-e", "router_drain=false", "-e", "router_policy=cache_aware",
                            playbook="playbooks/restart.yml")
        time.sleep(2)
    undrained = load.counts()
    assert control.rc == 0 and control.recap[badjson]["changed"] > 0, control
    assert not control.says("drained: "), control
    measured("roll with the drain: %s; without (control): %s; in the roll the address %s (%s)" % (
        drained, undrained, "moved or was given up" if vrrp_changed(rolled_said) else "stayed",
        rolled_said or "nothing logged"))
    assert drained["failed"] == 0 and drained["completed"] > 0, (drained, rolled_said)
    assert undrained["failed"] > 0, undrained
    roll_s = time.monotonic() - started - live_s - rerun_s

    # The fleet endpoint outlives its router (issue 40): streams on router_vip while the router host that holds it
    # loses its router (`docker kill`, which no restart policy undoes), then while the new holder's whole host
    # stops. Each time the other takes the address: the first request answered on it within 3 s of the kill,
    # none started after that fails; the streams cut on the dead router are counted. The killed router is started
    # again by keepalived's check and given back its workers; the stopped host, started again, loads the workers
    # and stays BACKUP: the address does not flap.
    [first] = routers.holder(vip)
    checked = routers.log()
    with StreamLoad(front, CI_KEY, "tiny", concurrency=2, max_tokens=200) as load:
        time.sleep(2)
        killed_at = time.monotonic()
        assert sh(docker_host, first, "docker kill gpuserve-router").returncode == 0
        took, took_one = first_answer(front, CI_KEY, killed_at)
        time.sleep(3)
    failed_after, cut = after_move(load.outcomes(), killed_at + took)
    [second] = routers.holder(vip)
    said = routers.since(checked)
    assert second != first and took < 3 and failed_after == [], (first, second, took, failed_after, said)
    measured("router killed on %s: %s holds %s, the first request answered %.2f s after the kill (it took %.2f s); %d "
             "stream(s) cut, none failed of those started after (%s); taken by: %s" % (
                 first, second, vip, took, took_one, len(cut), load.counts(), masters(said)))
    deadline = time.monotonic() + 60
    while routers.workers() != sorted(engines.values()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert routers.workers() == sorted(engines.values()), routers.workers()  # started again, its workers back
    assert routers.holder(vip) == [second]
    # badkey stopped while both router hosts are up: out of both routers and of what each recorded. It is started
    # again below while `second` is down, so `second`'s own record lacks it when it returns.
    halted = fleet.run("--limit", badkey, "-e", "router_policy=cache_aware", playbook="playbooks/stop.yml")
    assert halted.rc == 0, halted
    assert routers.workers() == sorted(u for h, u in engines.items() if h != badkey), routers.workers()
    # The whole host stopped: its engine goes with it. The router host that takes the address takes out of its
    # router the workers that do not answer (keepalived's notify_master), or the router would send that engine
    # requests until its own health checks mark it (each retried elsewhere about 1 s later: the first answer
    # came 2.5-2.8 s after the stop without this). The goal: the first answer within 3 s of the stop.
    checked = routers.log()
    with StreamLoad(front, CI_KEY, "tiny", concurrency=2, max_tokens=200) as load:
        time.sleep(2)
        stopped_at = time.monotonic()
        docker(docker_host, "stop", second)
        moved_s = None
        while moved_s is None and time.monotonic() - stopped_at < 10:
            if routers.holder(vip) == [first]:
                moved_s = time.monotonic() - stopped_at
            time.sleep(0.1)
        took_host, took_one = first_answer(front, CI_KEY, stopped_at)
        time.sleep(3)
    failed_after, cut = after_move(load.outcomes(), stopped_at + took_host)
    said = routers.since(checked)  # `second` is down: what `first` logged
    assert moved_s is not None and moved_s < 3 and took_host < 3 and failed_after == [], (
        moved_s, took_host, took_one, failed_after, said)
    live_engines = sorted(u for h, u in engines.items() if h not in (second, badkey))
    assert routers.workers_of(first) == live_engines, routers.workers_of(first)  # the stopped host's engine out
    measured("router host %s stopped: %s held %s %.2f s after the stop, the first request answered %.2f s after the "
             "stop (it took %.2f s); %d stream(s) cut, none failed of those started after (%s); taken by: %s" % (
                 second, first, vip, moved_s, took_host, took_one, len(cut), load.counts(), masters(said)))
    # A roll goes on while a router host is down: badkey starts again and joins the router that answers, and the
    # one that does not is named (W_ROUTER_UNREACHABLE), not a stop of the run.
    rolled = fleet.run("--limit", badkey, "-e", "llm_context=3072", "-e", "router_policy=cache_aware",
                       playbook="playbooks/restart.yml")
    assert rolled.rc == 0 and rolled.says("is now LIVE! on port %d" % ENGINE_PORTS["badkey"]), rolled
    assert rolled.says("W_ROUTER_UNREACHABLE [warning] %s %s: its router could not be reached to put the host back "
                       "into it" % (badkey, second)), rolled
    assert routers.workers_of(first) == sorted(live_engines + [engines[badkey]]), routers.workers_of(first)
    # `second` returns: its router starts with its old workers, and its check gives it those `first` serves and
    # noted (first's front, /gpuserve/router-workers, to a peer with the internal key) before it may hold the
    # address: badkey, added while it was down, and its own engine, which `first` took out when it stopped.
    restart_host(docker_host, bare_hosts, second)
    routers.capture_syslog(second)
    deadline = time.monotonic() + 120
    while routers.workers() != sorted(engines.values()) and time.monotonic() < deadline:
        time.sleep(1)
    assert routers.workers() == sorted(engines.values()), routers.workers()
    asked = [line for line in sh(docker_host, first, "docker logs gpuserve-router-front 2>&1").stdout.splitlines()
             if '"GET /gpuserve/router-workers" 200 ' in line]
    assert asked, "the returning router host never asked the other for its workers"
    measured("router host %s back: it asked %s's front for the workers: %s" % (second, first, asked[-1]))
    holders = set()
    for _reading in range(10):  # 5 s: it came back as BACKUP, the address stays
        holders.add(tuple(routers.holder(vip)))
        time.sleep(0.5)
    assert holders == {(first,)}, holders
    assert chat()[0] == 200

    # stop.yml on every host: the engines leave the router, then the router and its front stop.
    down = fleet.run("-e", "router_policy=cache_aware", playbook="playbooks/stop.yml")
    assert down.rc == 0 and down.says("the fleet endpoint is down"), down
    assert call("GET", front + "/health")[0] is None

    # What every container was started with, the engines' environment (where the key must be) aside.
    inspected = {}
    for name in engines:
        for container in sh(docker_host, name, "docker ps -aq").stdout.split():
            data = json.loads(sh(docker_host, name, "docker inspect " + container).stdout)[0]
            labels = data["Config"]["Labels"] or {}
            # The engines, the fronts and the router hold the internal key in their environment (a front puts it
            # in place of the client's key; the router sends it on /v1/responses), the one place it must be.
            holders = ("gpuserve.llm.engine", "gpuserve.llm.front", "gpuserve.llm.router")
            env = data["Config"].pop("Env") if any(h in labels for h in holders) else []
            assert not env or any(e.startswith(("LLAMA_API_KEY=", "GPUSERVE_UPSTREAM_KEY=", "GPUSERVE_ROUTER_API_KEY="))
                                  for e in env), data["Name"]
            inspected["docker inspect %s on %s" % (data["Name"], name)] = json.dumps(data)
    assert len(inspected) == 10, sorted(inspected)  # the three engines and their fronts, two routers and their fronts
    # remove.yml: the engines' containers and the router's go; the images stay.
    removed = fleet.run(playbook="playbooks/remove.yml")
    assert removed.rc == 0 and removed.says("the fleet endpoint is down: gpuserve-router-front and gpuserve-router "
                                            "removed"), removed
    assert all(sh(docker_host, n, "docker ps -aq").stdout.split() == [] for n in engines)
    assert sh(docker_host, good, "docker images -q gpuserve/llama.cpp").stdout.strip()

    secrets = {"llm_api_key": FLEET_KEY, "llm_api_key (rotated)": NEW_KEY, "llm_hf_token": TOKEN,
               "a wrong key": WRONG_KEY, "a refused token": WRONG_TOKEN, "client key ci": CI_KEY,
               "client key new": CLIENT_KEY, "client key old": OLD_KEY}
    places = dict(("output of %d: %s" % (i, name), result.output) for i, (name, result) in enumerate(runs))
    places.update(inspected)
    # Every file the runs wrote: the workstation's logs/, reports/ and caches (but the inputs the user
    # gave), and on each host the collection's folders, the users' homes, /tmp and the logs.
    inputs = set(str(tmp_path / n) for n in ("hosts.yml", "vaulted.yml", "vault-password", "keys-ci-old.yml",
                                             "keys-ci-new.yml", "keys-wrong.yml"))
    places.update((path, data) for path, data in files_bytes(tmp_path).items() if path not in inputs)
    for name in engines:
        places.update(host_files_bytes(docker_host, name, ["/var/lib/gpuserve", "/opt/gpuserve", "/home", "/root",
                                                           "/tmp", "/etc/docker", "/etc/gpuserve", "/var/log"]))
    assert any("/logs/%s/" % badkey in p for p in places) and any("/reports/fleet/" in p for p in places)
    assert any(p.startswith(good + ":/var/lib/gpuserve/hf/") for p in places), sorted(places)[:20]
    searching = time.process_time()
    leaks = find_secrets(secrets, places)
    searched_s = time.process_time() - searching
    assert leaks == [], "\n".join(leaks)
    measured("fleet test: LIVE %.0f s, rerun, check and failures %.0f s, rolls %.0f s, in all %.0f s; %d runs at -vvv, "
             "%d places searched for secrets (%.0f MB, %.1f s of CPU)" % (
                 live_s, rerun_s, roll_s, time.monotonic() - started, len(runs), len(places),
                 sum(len(text) for text in places.values()) / 1e6, searched_s))


def _service(docker_host, host):
    """[(container id, running, configuration label)] of the engine's containers on the host."""
    out = sh(docker_host, host, "docker ps -a --filter label=gpuserve.llm.service --format "
             "'{{.ID}} {{.State}} {{.Label \"gpuserve.llm.config\"}}'").stdout.split("\n")
    return [(i, state == "running", config) for i, state, config in (line.split() for line in out if line.strip())]


def _metric(url, name):
    """One metric of the engine's /metrics (llama-server's, with the key), summed over its labels."""
    status, text = call("GET", url + "/metrics", FLEET_KEY)
    assert status == 200, (url, status, text[:200])
    return prom_total(text, name)


def _status_and_retry(url, key):
    """(status, its Retry-After header or None) of one GET."""
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + key})
    try:
        with urllib.request.urlopen(request, timeout=30, context=tls_context()) as r:
            return r.status, r.headers.get("Retry-After")
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Retry-After")


def _health_polls(address, port, count):
    """{status: how many} of `count` GETs of a TLS front's /health sent one after another on one kept connection."""
    conn = http.client.HTTPSConnection(address, port, timeout=30, context=tls_context())
    try:
        got = collections.Counter()
        for _poll in range(count):
            conn.request("GET", "/health")
            answer = conn.getresponse()
            answer.read()
            got[answer.status] += 1
        return got
    finally:
        conn.close()


def _served(url):
    """How many decode calls the engine has made: it grows with every request it answers."""
    return _metric(url, "llamacpp:n_decode_total")
