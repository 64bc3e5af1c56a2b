"""meta/runtime.yml: the action group that lets a play set docker_host once for the collection's Docker modules."""
import glob
import os
import subprocess
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def documented_options(path):
    with open(path) as f:
        source = f.read()
    doc = source.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0]
    return yaml.safe_load(doc).get("options") or {}


def test_the_docker_group_is_every_module_with_a_docker_host_option():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as f:
        group = yaml.safe_load(f)["action_groups"]["docker"]
    modules = glob.glob(os.path.join(ROOT, "plugins", "modules", "*.py"))
    with_docker_host = sorted(os.path.basename(p)[:-3] for p in modules if "docker_host" in documented_options(p))
    ours = sorted(m for m in group if isinstance(m, str))
    assert with_docker_host and ours == with_docker_host
    # and community.docker's modules with them, so that one module_defaults names the daemon for both
    assert {"metadata": {"extend_group": ["community.docker.docker"]}} in group


def test_module_defaults_for_the_group_reach_a_module(tmp_path):
    socket = "unix://%s/no-daemon-here.sock" % tmp_path
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "gather_facts": False,
        "module_defaults": {"group/gpuserve.llm.docker": {"docker_host": socket}},
        "tasks": [{"gpuserve.llm.container_logs": {"name": "gpuserve-test"},
                   "vars": {"ansible_python_interpreter": sys.executable}}],
    }]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".collections"), ANSIBLE_NOCOLOR="1")
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
                          "-c", "local", str(tmp_path / "play.yml")], cwd=str(tmp_path), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False).stdout
    assert "cannot read the logs of gpuserve-test from %s" % socket in out, out
