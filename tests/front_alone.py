"""The front (roles/front) by itself (TEST PLUMBING): templates/front.conf.j2 rendered with Jinja2 and the two
Ansible filters it uses, and - for tests that need its behaviour but not the play around it - nginx with that
configuration and the role's JavaScript, in a container of the Debian root the test setup cached
(GPUSERVE_TEST_IMAGE_CACHE/gpuserve-front-*.tar, `docker import`ed once under its file's name, its workers' user
made by the role's own command, front_worker_add).
The plays' fronts are tested through the role itself (test_host_play, test_service_play, molecule)."""
import glob
import hashlib
import os
import subprocess
import time
import urllib.error
import urllib.request

import jinja2
import yaml

from ansible_collections.gpuserve.llm.plugins.module_utils import engines

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = {"alice": "sk-alice-0123456789abcdef", "ci.bot": "sk-ci-bot-0123456789abcdef"}


def _front_vars():
    """The front role's vars file (roles/front/vars/main.yml)."""
    with open(os.path.join(ROOT, "roles", "front", "vars", "main.yml")) as f:
        return yaml.safe_load(f)


def worker_user_command():
    """front_worker_add as the role renders it: the command that makes nginx's workers' user in the image."""
    front = _front_vars()
    return jinja2.Template(front["front_worker_add"]).render(**front)


def render(**changes):
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters["hash"] = lambda value, kind: hashlib.new(kind, value.encode()).hexdigest()
    env.filters["bool"] = lambda value: value is True or str(value).lower() in ("true", "yes", "1")
    with open(os.path.join(ROOT, "templates", "front.conf.j2")) as f:
        template = env.from_string(f.read())
    context = dict(front_name="gpuserve-llm-front", front_stage="service", front_workers=2, front_worker_connections=1024,
                   front_clients=CLIENTS, front_body_max_kib=192, front_rate_per_key=20, front_rate_burst=40,
                   front_connections_per_key=8, front_connections_per_address=16, front_retry_after=1,
                   front_listen="0.0.0.0:8020", front_upstream="127.0.0.1:18020", front_health_path="/health",
                   front_routes=engines.PROFILES["vllm"]["front_routes"], llm_tls=False, front_media_item_mib=20,
                   front_media=engines.PROFILES["vllm"]["media_per_request"],
                   front_media_why="vllm takes at most 4 images and 1 video a request", front_media_urls="data_only",
                   front_worker_user=_front_vars()["front_worker_user"])
    context.update(changes)
    return template.render(**context)


class Front:
    """nginx before `upstream` (host:port) on 127.0.0.1:`port`, host network; render()'s values changed by `changes`."""

    def __init__(self, docker_host, name, port, upstream, folder, upstream_key="", **changes):
        roots = sorted(glob.glob(os.path.join(os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", ""), "gpuserve-front-*.tar")))
        assert roots, "no front root in GPUSERVE_TEST_IMAGE_CACHE: tests/run.sh's setup makes it"
        image = "gpuserve-test/front:" + os.path.basename(roots[-1])[len("gpuserve-front-"):-len(".tar")]
        self.docker = ["docker", "-H", docker_host]
        # The root with nginx's workers' user made as the role's Dockerfile makes it, named by that command.
        command = worker_user_command()
        image += "-" + hashlib.sha256(command.encode()).hexdigest()[:8]
        if subprocess.run(self.docker + ["image", "inspect", image], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode:
            subprocess.run(self.docker + ["import", roots[-1], image + "-root"], check=True, stdout=subprocess.PIPE)
            subprocess.run(self.docker + ["build", "--network", "host", "-t", image, "-"], check=True,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           input=("FROM %s-root\nRUN %s\n" % (image, command)).encode())
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "front.conf"), "w") as f:
            f.write(render(front_name=name, front_listen="127.0.0.1:%d" % port, front_upstream=upstream, **changes))
        for script in ("front_auth.js", "front_media.js"):
            with open(os.path.join(ROOT, "roles", "front", "files", script)) as src, \
                    open(os.path.join(folder, script), "w") as dest:
                dest.write(src.read())
        self.name, self.url = name, "http://127.0.0.1:%d" % port
        subprocess.run(self.docker + ["rm", "-f", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        subprocess.run(self.docker + ["run", "-d", "--name", name, "--network", "host", "-e",
                                      "GPUSERVE_UPSTREAM_KEY=" + upstream_key, "-v", "%s:/etc/gpuserve:ro" % folder,
                                      image, "nginx", "-c", "/etc/gpuserve/front.conf", "-g", "daemon off;"],
                       check=True, stdout=subprocess.PIPE)
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2).close()
                return
            except urllib.error.HTTPError:
                return  # nginx answers
            except (urllib.error.URLError, OSError):
                if time.time() > deadline:
                    raise AssertionError("the front did not answer in 20 s:\n" + self.logs())
                time.sleep(0.2)

    def logs(self):
        return subprocess.run(self.docker + ["logs", self.name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False).stdout

    def stop(self):
        subprocess.run(self.docker + ["rm", "-f", self.name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=False)
