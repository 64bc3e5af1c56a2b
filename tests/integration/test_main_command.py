"""The README's main command (scripts/bring-up-local.sh) brings inventories/local up for real: the
LIVE line, an answering endpoint, and playbooks/stop.yml keeping the logs. It runs against the test
bed's daemon (DOCKER_HOST) with this test run's virtualenv, so it installs nothing on the machine."""
import json
import os
import shutil
import subprocess
import urllib.request

from conftest import BIN, ROOT, docker

PORT = 18160  # not 18150: test_autotune_play.py (the other stream) serves there
NAME = "gpuserve-test-main"


def test_the_main_command_brings_the_local_inventory_live_and_stop_keeps_the_logs(docker_host, wheelhouse, tmp_path):
    env = dict(os.environ, DOCKER_HOST=docker_host, GPUSERVE_VENV=os.path.dirname(BIN), HOME=str(tmp_path),
               ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    extra = ["-e", "llm_port=%d" % PORT, "-e", "llm_container_name=" + NAME,
             "-e", "host_venv_wheelhouse=" + wheelhouse,
             "-e", "image_debian_cache=" + os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images"))]
    logs = os.path.join(ROOT, "logs", "localhost")
    before = set(os.listdir(logs)) if os.path.isdir(logs) else set()
    try:
        up = subprocess.run(["bash", os.path.join(ROOT, "scripts", "bring-up-local.sh")] + extra, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=900, check=False)
        said = " ".join(up.stdout.split())
        assert up.returncode == 0, up.stdout[-6000:]
        assert "gpuserve/tiny-llama-dummy is now LIVE! on port %d (dummy weights)" % PORT in said, up.stdout[-6000:]
        # the README's curl
        request = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % PORT, headers={
            "Content-Type": "application/json"}, data=json.dumps(
                {"model": "tiny", "messages": [{"role": "user", "content": "Hello"}]}).encode())
        with urllib.request.urlopen(request, timeout=30) as r:
            assert json.loads(r.read())["choices"][0]["message"]["content"]

        stop = subprocess.run([os.path.join(BIN, "ansible-playbook"), "playbooks/stop.yml", "-i", "inventories/local",
                               "-e", "llm_docker_host=" + docker_host] + extra, cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
        assert stop.returncode == 0, stop.stdout[-4000:]
        new = set(os.listdir(logs)) - before
        assert len(new) == 1
        saved = os.listdir(os.path.join(logs, new.pop()))
        assert sorted(saved) == [NAME + "-a.log", "settings.json"]
        assert "running" not in docker(docker_host, "ps", "-a", "--filter", "name=" + NAME,
                                       "--format", "{{.State}}").stdout
    finally:
        for slot in "ab":
            docker(docker_host, "rm", "-f", "%s-%s" % (NAME, slot), check=False)
        for name in set(os.listdir(logs)) - before if os.path.isdir(logs) else []:
            shutil.rmtree(os.path.join(logs, name), ignore_errors=True)
