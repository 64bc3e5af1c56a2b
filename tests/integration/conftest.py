"""Run the collection's playbooks for real, with local-connection hosts whose NVML is replayed.

Each test host gets its own collection virtualenv (host_venv_path) holding the pynvml test double
(installed from a wheelhouse, the offline path) and its own scenario file in that virtualenv, where
the double reads it. Everything lives under pytest's tmp_path.

A host is set up already unless a test says `fresh=True`: its virtualenv and wheelhouse are copies
of ones made once per session the way the host_venv role makes them (python3 -m venv, pip from the
wheelhouse, the wheelhouse stamp), so the role finds them current, as on any host's second run.
Making them costs ~20 s of CPU a host; the tests about the virtualenv itself (preflight's check mode,
no interpreter, refused settings) and molecule's scenarios start from nothing.
"""
import hashlib
import importlib.util
import json
import os
import pathlib
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

import sysfs_tree
import task_times
from ansible_collections.gpuserve.llm.plugins.module_utils.host_checks import sysfs_bdf as sysfs_tree_bdf

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
SCENARIOS = os.path.join(TESTS, "nvml_scenarios")
BIN = os.path.dirname(sys.executable)
# Every playbook run's wall time, for the summary at the end (where the test command's time goes).
PLAYBOOK_TIMES = []
# And every task's (tests/callback_plugins/task_times.py), into a file of this session's unless the test
# command names one.
os.environ.setdefault("GPUSERVE_TASK_TIMES", os.path.join(tempfile.mkdtemp(prefix="gpuserve-task-times-"),
                                                          "pytest.jsonl"))
os.environ["ANSIBLE_CALLBACK_PLUGINS"] = os.path.join(TESTS, "callback_plugins")
os.environ["ANSIBLE_CALLBACKS_ENABLED"] = "task_times"


def _double():
    spec = importlib.util.spec_from_file_location("pynvml_double_loader", os.path.join(TESTS, "nvml_double", "pynvml.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_requirements():
    """requirements-host.txt with the pynvml test double in place of nvidia-ml-py."""
    with open(os.path.join(ROOT, "requirements-host.txt")) as f:
        reqs = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return [r for r in reqs if not r.startswith("nvidia-ml-py")] + ["nvml-replay==0.1.0"]


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory):
    """The local hosts' wheelhouse: requirements-host.txt's wheels for the Python their virtualenvs
    are made with (host_venv_python: python3), downloaded once into .work/, + the double."""
    version = subprocess.run(["python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    cache = os.path.join(ROOT, ".work", "wheelhouse-py" + version)
    stamp = os.path.join(cache, ".stamp")
    with open(os.path.join(ROOT, "requirements-host.txt")) as f:
        wanted = f.read()
    if not os.path.exists(stamp) or open(stamp).read() != wanted:
        # Made beside and renamed into place: tests/run.sh runs two pytest processes that may both get here.
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        fresh = tempfile.mkdtemp(prefix=os.path.basename(cache) + ".new-", dir=os.path.dirname(cache))
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                        "--only-binary=:all:", "--python-version", version,
                        "-r", os.path.join(ROOT, "requirements-host.txt"), "-d", fresh],
                       check=True)
        with open(os.path.join(fresh, ".stamp"), "w") as f:
            f.write(wanted)
        old = "%s.old-%d" % (cache, os.getpid())
        if os.path.exists(cache):
            os.rename(cache, old)
        try:
            os.rename(fresh, cache)
        except OSError:  # the other process put its copy there first: the same pins
            shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)
    sys.path.insert(0, os.path.join(TESTS, "nvml_double"))
    import build_wheel
    out = tmp_path_factory.mktemp("wheelhouse")
    for name in os.listdir(cache):
        if name.endswith(".whl"):
            shutil.copy(os.path.join(cache, name), str(out))
    build_wheel.build(str(out))
    return str(out)


def _seed(root, wheelhouse):
    """A virtualenv at root/venv with the host requirements from `wheelhouse`, and root/wheelhouse its copy."""
    venv, wheels = root / "venv", root / "wheelhouse"
    subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-index", "--find-links", wheelhouse] + host_requirements(), check=True)
    shutil.copytree(wheelhouse, str(wheels))
    names = sorted(n for n in os.listdir(wheelhouse) if not n.startswith("."))
    # roles/host_venv/vars/main.yml: the wheel names' sha256, which the role compares with its stamp.
    (wheels / ".gpuserve-wheelhouse").write_text(hashlib.sha256(" ".join(names).encode()).hexdigest())
    return venv, wheels


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@pytest.fixture(scope="session")
def seeded_host(wheelhouse):
    """A set-up host's virtualenv and wheelhouse: what host_venv leaves behind. Made once for its inputs (the
    wheels' bytes, python3's version) in .work/ and shared by the test run's pytest processes (tests/run.sh starts
    up to five): each took 10-16 s of CPU to make its own. Tests copy it (Fleet.host), never change it. Made where
    it stays (a virtualenv's scripts name its path), under a lock directory holding the maker's pid."""
    digest = hashlib.sha256(subprocess.run(["python3", "-V"], stdout=subprocess.PIPE, text=True,
                                           check=True).stdout.encode())
    for name in sorted(os.listdir(wheelhouse)):
        with open(os.path.join(wheelhouse, name), "rb") as f:
            digest.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    root = pathlib.Path(ROOT, ".work", "seeded-host", digest.hexdigest()[:16])
    done, lock = root / ".complete", pathlib.Path(str(root) + ".lock")
    root.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + 300
    while not done.exists():
        try:
            lock.mkdir()
        except FileExistsError:
            try:
                holder = int((lock / "pid").read_text())
            except (OSError, ValueError):
                holder = None  # being written
            if (holder is not None and not _alive(holder)) or time.monotonic() > deadline:
                shutil.rmtree(str(lock), ignore_errors=True)  # a maker that died (or never ends): made again
            time.sleep(0.5)
            continue
        try:
            (lock / "pid").write_text(str(os.getpid()))
            shutil.rmtree(str(root), ignore_errors=True)  # what a maker that died left
            root.mkdir()
            _seed(root, wheelhouse)
            done.write_text("made by pid %d\n" % os.getpid())
        finally:
            shutil.rmtree(str(lock), ignore_errors=True)
    return root / "venv", root / "wheelhouse"


@pytest.fixture(scope="session")
def docker_host():
    """The test bed's Docker daemon: the one tests/run.sh started, or one started here and stopped after."""
    if os.environ.get("GPUSERVE_TEST_DOCKER_HOST"):
        yield os.environ["GPUSERVE_TEST_DOCKER_HOST"]
        return
    script = os.path.join(TESTS, "testbed", "dockerd.sh")
    started = subprocess.run([script, "start"], stdout=subprocess.PIPE, text=True, check=True)
    yield started.stdout.strip().split("=", 1)[1]
    subprocess.run([script, "stop"], check=False)


@pytest.fixture(scope="session")
def registry():
    """A real local registry (Debian's docker-registry), started here and stopped after."""
    script = os.path.join(TESTS, "testbed", "registry.sh")
    address = subprocess.run([script, "start"], stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    yield address
    subprocess.run([script, "stop"], check=False)


def docker(docker_host, *args, **kwargs):
    """The docker CLI against the test bed's daemon: test plumbing, never the collection's code path."""
    return subprocess.run(["docker", "-H", docker_host] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=kwargs.get("check", True), input=kwargs.get("input"))


def service_containers(docker_host, prefix):
    """name -> (id, running) of the service's containers (label gpuserve.llm.service=prefix)."""
    out = docker(docker_host, "ps", "-a", "--filter", "label=gpuserve.llm.service=" + prefix,
                 "--format", "{{.Names}} {{.ID}} {{.State}}").stdout.split("\n")
    return dict((n, (i, s == "running")) for n, i, s in (line.split() for line in out if line.strip()))


def broken_image(docker_host):
    """An image with no engine in it (test plumbing: imported from a tar holding one empty file)."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("etc/broken"), io.BytesIO(b""))
    tag = "gpuserve-test/no-engine:1"
    subprocess.run(["docker", "-H", docker_host, "import", "-", tag], input=buf.getvalue(), check=True,
                   stdout=subprocess.PIPE)
    return tag


class Fleet:
    """An inventory of local-connection hosts, one NVML scenario each, and a way to run playbooks."""

    def __init__(self, tmp_path, wheelhouse, docker_host, seeded_host):
        self.dir = tmp_path
        self.wheelhouse = wheelhouse
        self.seeded = seeded_host
        self.docker_host = docker_host
        self.hosts = {}

    def host(self, name, scenario=None, acs=None, iommu=None, fresh=False, **hostvars):
        """A host replaying `scenario`; its sysfs has each GPU under a root port of its own, with ACS
        control words from `acs` ({gpu index: word}, default 0) and IOMMU group types from `iommu`.
        `fresh`: no virtualenv or wheelhouse yet (else copies of the session's set-up ones)."""
        venv = self.dir / name / "venv"
        if fresh:
            venv.mkdir(parents=True)
        else:
            (self.dir / name).mkdir(parents=True)
            # cp -a keeps the interpreter symlink; a virtualenv run as venv/bin/python works where it lies.
            subprocess.run(["cp", "-a", str(self.seeded[0]), str(venv)], check=True)
            subprocess.run(["cp", "-a", str(self.seeded[1]), str(self.dir / name / "wheelhouse")], check=True)
        chains, groups = {}, {}
        if scenario:
            data = _double().load_scenario(os.path.join(SCENARIOS, scenario) if not os.path.isabs(scenario) else scenario)
            (venv / "nvml-replay.json").write_text(json.dumps(data))
            # The driver's device nodes, as the scenario says (a host with a driver when it says nothing).
            dev = self.dir / name / "dev"
            dev.mkdir(parents=True)
            nodes = data.get("dev_nodes", ["nvidiactl"] + ["nvidia%d" % i for i in range(len(data["devices"]))])
            for node in nodes:
                (dev / node).touch()
            hostvars.setdefault("preflight_dev_root", str(dev))
            for i, dev in enumerate(data["devices"]):
                bdf = sysfs_tree_bdf(dev["pci_bus_id"])
                chains[bdf] = [("0000:00:%02x.0" % (i + 1), (acs or {}).get(i, 0))]
                if iommu:
                    groups[bdf] = iommu
        hostvars.setdefault("preflight_sysfs_root", sysfs_tree.make_sysfs(str(self.dir / name / "sys"), chains, groups))
        self.hosts[name] = dict({
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "host_venv_path": str(venv),
            "host_venv_wheelhouse": self.wheelhouse,
            "host_venv_wheelhouse_dest": str(self.dir / name / "wheelhouse"),
            "host_venv_packages": host_requirements(),
            "llm_docker_host": self.docker_host,
            "llm_data_dir": str(self.dir / name / "data"),
            "llm_port": 18020 + len(self.hosts),
            # These hosts are this machine, on the test bed's daemon: the host stage leaves both alone
            # (test_host_play.py runs it on hosts of its own).
            "host_setup": False,
            # A progress line every 2 s while an image builds (30 s by default).
            "image_progress_interval": 2,
            # Budgets that fit the test machine.
            "preflight_disk_checkpoint_gib": 1,
            "preflight_disk_image_gib": 1,
            "preflight_disk_kernels_gib": 1,
        }, **hostvars)
        return venv

    def _command(self, playbook, args, extra_env):
        inventory = self.dir / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"llm_hosts": {"hosts": self.hosts}}))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        env.pop("NVML_REPLAY_SCENARIO", None)
        env.update(extra_env)
        return [os.path.join(BIN, "ansible-playbook"), os.path.join(ROOT, playbook), "-i", str(inventory)] + list(args), env

    def run(self, playbook="site.yml", *args, **extra_env):
        argv, env = self._command(playbook, args, extra_env)
        started, cpu = time.monotonic(), children_cpu()
        proc = subprocess.run(argv, cwd=str(self.dir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=600, check=False)
        return Result(proc, self.dir, timed=(started, [playbook] + list(args), cpu))

    def start(self, playbook="site.yml", *args, **extra_env):
        """The playbook in the background (to act on the hosts while it runs); finish() waits for it."""
        argv, env = self._command(playbook, args, extra_env)
        proc = subprocess.Popen(argv, cwd=str(self.dir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True)
        proc.timed = (time.monotonic(), [playbook] + list(args), children_cpu())
        return proc

    def finish(self, proc):
        proc.stdout = proc.communicate(timeout=600)[0]
        return Result(proc, self.dir, timed=proc.timed)


def children_cpu():
    """CPU seconds of this process's ended children (a run's ansible-playbook with its workers and ssh clients;
    a thread's commands that end meanwhile count too): a run's share of the machine."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def task_results(output, task):
    """What a playbook's output says under every header of the task named (its batches'), up to the next header."""
    return "".join(re.findall(r"(?ms)^TASK \[%s[^\n]*\n(.*?)(?=^TASK \[|^PLAY |\Z)" % re.escape(task), output))


def _shown(args):
    """A run's arguments for the summary: extra variables by name only (some are test secrets)."""
    return " ".join(re.sub(r"^([\w.]+)=.*", r"\1=...", str(a)) for a in args)[:110]


MEASURED = []  # (test, line): the figures a test measured, printed at the end of the run, passed or not


def measured(line):
    """A figure the test measured (failover times, the roll's streams): printed now (-s) and again in the run's
    summary, where CI shows it (pytest hides a passing test's output)."""
    print(line)
    MEASURED.append((os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0], line))


def pytest_terminal_summary(terminalreporter):
    if MEASURED:
        terminalreporter.section("what the tests measured")
        for test, line in MEASURED:
            terminalreporter.write_line("%s: %s" % (test[:48], line[:600]))
    if not PLAYBOOK_TIMES:
        return
    total = sum(t[0] for t in PLAYBOOK_TIMES)
    terminalreporter.section("playbook runs: %d, %.0f s and %.0f s of this machine's CPU in all; the slowest"
                             % (len(PLAYBOOK_TIMES), total, sum(t[3] for t in PLAYBOOK_TIMES)))
    terminalreporter.write_line("   wall    CPU (the workstation's side: ansible-playbook, its workers, ssh)  output")
    for seconds, test, args, cpu, size in sorted(PLAYBOOK_TIMES, reverse=True)[:30]:
        terminalreporter.write_line("%7.1f s %6.1f s %5d KiB  %-48s %s" % (seconds, cpu, size // 1024, test[:48], args))
    terminalreporter.section("the tasks that took the most wall time over those runs")
    for line in task_times.summary([os.environ["GPUSERVE_TASK_TIMES"]], top=40):
        terminalreporter.write_line(line)


class Result:
    def __init__(self, proc, workdir, timed=None):
        if timed is not None:  # (started, what ran, children_cpu() at the start)
            test = os.environ.get("PYTEST_CURRENT_TEST", "?").split("::")[-1].split(" ")[0]
            PLAYBOOK_TIMES.append((time.monotonic() - timed[0], test, _shown(timed[1]), children_cpu() - timed[2],
                                   len(proc.stdout or "")))
        self.rc = proc.returncode
        self.output = proc.stdout
        self.workdir = workdir
        with open(os.path.join(str(workdir), "ansible-playbook.log"), "a") as f:  # for a failing test's reader
            f.write(proc.stdout)
        self.recap = {}
        for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", self.output, re.M):
            self.recap[m.group(1)] = dict(ok=int(m.group(2)), changed=int(m.group(3)), failed=int(m.group(5)))

    def says(self, phrase):
        """The phrase is in the output, however the callback wrapped its lines."""
        return " ".join(phrase.split()) in " ".join(self.output.split())

    def report(self):
        with open(os.path.join(str(self.workdir), "reports", "preflight.json")) as f:
            return json.load(f)["hosts"]

    def codes(self, host):
        return sorted(f["code"] for f in self.report()[host]["findings"])

    def __repr__(self):
        # The failures first (a -vvv run's end is mostly connection lines), then the end of the output.
        failed = [line[:1500] for line in self.output.splitlines()
                  if re.match(r"(fatal|failed): |\S+ \[error\] |FAILED - |ERROR!", line.strip())]
        return "rc=%s\n%s\n...\n%s" % (self.rc, "\n".join(failed[-12:]), self.output[-4000:])


@pytest.fixture
def fleet(tmp_path, wheelhouse, docker_host, seeded_host):
    return Fleet(tmp_path, wheelhouse, docker_host, seeded_host)


def files_bytes(*roots):
    """{path: bytes} of every file under the roots (binary files too: the search for secrets reads bytes)."""
    out = {}
    for root in roots:
        for folder, _dirs, names in os.walk(str(root)):
            for name in names:
                path = os.path.join(folder, name)
                if os.path.isfile(path) and not os.path.islink(path):
                    with open(path, "rb") as f:
                        out[path] = f.read()
    return out


def vaulted_dict(folder, filename, name, values):
    """An extra-vars file in `folder` holding `name`: {key: value, ...}, each value encrypted with Ansible Vault
    (the password file vaulted() wrote); the arguments that give it to ansible-playbook."""
    password = folder / "vault-password"
    lines = ["---", "%s:" % name]
    for key, value in values.items():
        encrypted = subprocess.run([os.path.join(BIN, "ansible-vault"), "encrypt_string", "--vault-password-file",
                                    str(password), "--name", key, value], stdout=subprocess.PIPE, text=True,
                                   check=True).stdout
        lines.extend("  " + line for line in encrypted.splitlines())
    (folder / filename).write_text("\n".join(lines) + "\n")
    return ["-e", "@" + str(folder / filename)]


def vaulted(folder, name, value):
    """An extra-vars file in `folder` holding `name` encrypted with Ansible Vault, and its password file:
    the arguments that give them to ansible-playbook."""
    password = folder / "vault-password"
    password.write_text("gpuserve-test-vault\n")
    encrypted = subprocess.run([os.path.join(BIN, "ansible-vault"), "encrypt_string", "--vault-password-file",
                                str(password), "--name", name, value], stdout=subprocess.PIPE, text=True, check=True).stdout
    (folder / "vaulted.yml").write_text("---\n" + encrypted)
    return ["-e", "@" + str(folder / "vaulted.yml"), "--vault-password-file", str(password)]
