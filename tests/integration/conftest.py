"""Run the collection's playbooks for real, with local-connection hosts whose NVML is replayed.

Each test host gets its own collection virtualenv (host_venv_path) holding the pynvml test double
(installed from a wheelhouse, the offline path) and its own scenario file in that virtualenv, where
the double reads it. Everything lives under pytest's tmp_path.
"""
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(TESTS)
SCENARIOS = os.path.join(TESTS, "nvml_scenarios")
BIN = os.path.dirname(sys.executable)


def _double():
    spec = importlib.util.spec_from_file_location("pynvml_double_loader", os.path.join(TESTS, "nvml_double", "pynvml.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory):
    sys.path.insert(0, os.path.join(TESTS, "nvml_double"))
    import build_wheel
    out = tmp_path_factory.mktemp("wheelhouse")
    build_wheel.build(str(out))
    return str(out)


class Fleet:
    """An inventory of local-connection hosts, one NVML scenario each, and a way to run playbooks."""

    def __init__(self, tmp_path, wheelhouse):
        self.dir = tmp_path
        self.wheelhouse = wheelhouse
        self.hosts = {}

    def host(self, name, scenario=None, **hostvars):
        venv = self.dir / name / "venv"
        venv.mkdir(parents=True)
        if scenario:
            data = _double().load_scenario(os.path.join(SCENARIOS, scenario) if not os.path.isabs(scenario) else scenario)
            (venv / "nvml-replay.json").write_text(json.dumps(data))
        self.hosts[name] = dict({
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "host_venv_path": str(venv),
            "host_venv_wheelhouse": self.wheelhouse,
            "host_venv_wheelhouse_dest": str(self.dir / name / "wheelhouse"),
            "host_venv_packages": ["nvml-replay==0.1.0"],
        }, **hostvars)
        return venv

    def run(self, playbook="site.yml", *args, **extra_env):
        inventory = self.dir / "hosts.yml"
        inventory.write_text(yaml.safe_dump({"llm_hosts": {"hosts": self.hosts}}))
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
                   ANSIBLE_PYTHON_INTERPRETER=sys.executable)
        env.pop("NVML_REPLAY_SCENARIO", None)
        env.update(extra_env)
        proc = subprocess.run(
            [os.path.join(BIN, "ansible-playbook"), os.path.join(ROOT, playbook), "-i", str(inventory)] + list(args),
            cwd=str(self.dir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        return Result(proc, self.dir)


class Result:
    def __init__(self, proc, workdir):
        self.rc = proc.returncode
        self.output = proc.stdout
        self.workdir = workdir
        self.recap = {}
        for m in re.finditer(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", self.output, re.M):
            self.recap[m.group(1)] = dict(ok=int(m.group(2)), changed=int(m.group(3)), failed=int(m.group(5)))

    def report(self):
        with open(os.path.join(str(self.workdir), "reports", "preflight.json")) as f:
            return json.load(f)["hosts"]

    def codes(self, host):
        return sorted(f["code"] for f in self.report()[host]["findings"])

    def __repr__(self):
        return "rc=%s\n%s" % (self.rc, self.output[-6000:])


@pytest.fixture
def fleet(tmp_path, wheelhouse):
    return Fleet(tmp_path, wheelhouse)
