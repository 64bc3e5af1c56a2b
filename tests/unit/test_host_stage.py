"""The host stage's parts that need no host: signing keys read and pinned (openpgp), apt's plan
(apt_plan, apt_packages refusing a wrong key before anything is written), and docker_daemon against
a stand-in Engine API on a unix socket: the guard, a reload by SIGHUP, waiting for a configuration."""
import http.server
import json
import os
import signal
import socketserver
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import apt_plan, openpgp
from module_run import run_module

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = os.path.join(ROOT, "tests", "fixtures", "openpgp")
# As gpg 2.2.40 printed them (tests/fixtures/openpgp/README.md).
TEST_FPR = "E02342905E11D912A26929338F6A09FA3E4EA58E"
OTHER_FPR = "573459946DA26B721CAE2379DEA9DC2B5C20C98F"
# Debian's "Debian Stable Release Key (12/bookworm)", in debian-archive-keyring on every Debian host.
DEBIAN_STABLE = "/usr/share/keyrings/debian-archive-bookworm-stable.gpg"


def key(name):
    with open(os.path.join(KEYS, name), "rb") as f:
        return f.read()


def test_fingerprints_of_armored_ed25519_and_rsa_keys_are_gpgs():
    binary, found = openpgp.primary_fingerprints(key("test-ed25519.asc"))
    assert found == [TEST_FPR]
    assert openpgp.primary_fingerprints(binary) == (binary, [TEST_FPR])  # the keyring apt takes reads the same
    assert binary[0] & 0x80 and len(binary) < len(key("test-ed25519.asc"))
    assert openpgp.primary_fingerprints(key("other-rsa2048.asc"))[1] == [OTHER_FPR]
    # Two keys in one file: both primaries, in order (a pin then names one of two: refused by the module).
    both = key("test-ed25519.asc") + b"\n" + key("other-rsa2048.asc")
    assert openpgp.primary_fingerprints(openpgp.dearmor(key("test-ed25519.asc")) + openpgp.dearmor(
        key("other-rsa2048.asc")))[1] == [TEST_FPR, OTHER_FPR]
    assert openpgp.primary_fingerprints(both)[1] == [TEST_FPR]  # the first armored block only


@pytest.mark.skipif(not os.path.exists(DEBIAN_STABLE), reason="not a Debian machine")
def test_a_real_binary_keyring_old_format_packets():
    with open(DEBIAN_STABLE, "rb") as f:
        assert openpgp.primary_fingerprints(f.read())[1] == ["4D64FEC119C2029067D6E791F8D2585B8783D481"]


@pytest.mark.parametrize("data, why", [
    (b"", "it is empty"),
    (b"<html><body>404 Not Found</body></html>", "no ASCII-armored OpenPGP public key block"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!!\n-----END PGP PUBLIC KEY BLOCK-----\n", "not valid base64"),
    (b"\x99\x01\x0d\x04", "runs past the end"),
    (bytes([0xC6, 0x05, 0x03, 1, 2, 3, 4]), "version 3"),
])
def test_what_is_not_a_key_is_said_plainly(data, why):
    with pytest.raises(openpgp.KeyProblem) as e:
        openpgp.primary_fingerprints(data)
    assert why in str(e.value)


def test_fingerprints_are_compared_in_one_form():
    assert openpgp.normal("9DC8 5822 9FC7 DD38 854A  E2D8 8D81 803C 0EBF CD88") == \
        "9DC858229FC7DD38854AE2D88D81803C0EBFCD88"
    assert openpgp.normal("0xc95b321b61e88c1809c4f759ddcae044f796ecb0") == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


def test_apts_simulation_is_read_as_the_plan():
    out = """NOTE: This is only a simulation!
Reading package lists...
The following NEW packages will be installed:
  containerd docker.io runc
Inst runc (1.1.5+ds1-1+deb12u1 Debian:12.12/oldstable [amd64])
Inst containerd (1.6.20~ds1-1+b1 Debian:12.12/oldstable [amd64])
Inst nvidia-container-toolkit [1.17.8-1] (1.18.2-1 nvidia.github.io [amd64])
Remv docker-ce [5:29.7.1-1~debian.12~bookworm]
Conf runc (1.1.5+ds1-1+deb12u1 Debian:12.12/oldstable [amd64])
"""
    steps = apt_plan.plan(out)
    assert [(s["name"], s["action"], s["from"], s["to"]) for s in steps] == [
        ("runc", "install", None, "1.1.5+ds1-1+deb12u1"),
        ("containerd", "install", None, "1.6.20~ds1-1+b1"),
        ("nvidia-container-toolkit", "upgrade", "1.17.8-1", "1.18.2-1"),
        ("docker-ce", "remove", "5:29.7.1-1~debian.12~bookworm", None)]
    assert [apt_plan.describe(s) for s in steps[1:]] == [
        "install containerd 1.6.20~ds1-1+b1", "change nvidia-container-toolkit 1.17.8-1 -> 1.18.2-1",
        "remove docker-ce 5:29.7.1-1~debian.12~bookworm"]


def test_pins_and_what_is_installed():
    assert apt_plan.spec("nvidia-container-toolkit=1.18.2-1") == ("nvidia-container-toolkit", "1.18.2-1")
    assert apt_plan.spec("docker-ce=5:29.7.1-1~debian.12~bookworm") == ("docker-ce", "5:29.7.1-1~debian.12~bookworm")
    with pytest.raises(ValueError):
        apt_plan.spec("Docker Engine")
    installed = {"docker.io": "20.10.24+dfsg1-1+deb12u1", "nvidia-container-toolkit": "1.18.2-1"}
    assert apt_plan.satisfied(installed, ["docker.io", "nvidia-container-toolkit=1.18.2-1"])
    assert not apt_plan.satisfied(installed, ["nvidia-container-toolkit=1.18.1-1"])
    assert not apt_plan.satisfied(installed, ["rsync"])
    assert apt_plan.source_line("https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)", "/", [],
                                "/etc/apt/keyrings/gpuserve-nvidia.gpg") == (
        "deb [signed-by=/etc/apt/keyrings/gpuserve-nvidia.gpg] https://nvidia.github.io/libnvidia-container/stable/"
        "deb/$(ARCH) /")


def test_apt_update_signature_errors_are_told_apart():
    out = """Hit:1 http://deb.debian.org/debian bookworm InRelease
Get:2 http://127.0.0.1:8000/libnvidia-container/stable/deb/amd64  InRelease [1,531 B]
Err:2 http://127.0.0.1:8000/libnvidia-container/stable/deb/amd64  InRelease
  The following signatures couldn't be verified because the public key is not available: NO_PUBKEY 8F6A09FA3E4EA58E
E: The repository 'http://127.0.0.1:8000/libnvidia-container/stable/deb/amd64  InRelease' is not signed."""
    bad = apt_plan.signature_problem(out)
    assert any("NO_PUBKEY 8F6A09FA3E4EA58E" in line for line in bad) and any("is not signed" in line for line in bad)
    assert apt_plan.signature_problem("Hit:1 http://deb.debian.org/debian bookworm InRelease\nE: Unable to locate "
                                      "package nvidia-container-toolkit") == []


def test_a_wrong_fingerprint_stops_before_anything_is_written(tmp_path):
    source = {"name": "nvidia", "uri": "http://127.0.0.1:9/libnvidia-container/stable/deb/$(ARCH)", "suite": "/",
              "key_url": os.path.join(KEYS, "test-ed25519.asc"), "key_fingerprint": OTHER_FPR}
    for check in (True, False):
        result = run_module("apt_packages", tmp_path, check=check, packages=["nvidia-container-toolkit=1.18.2-1"],
                            sources=[source])
        assert result["failed"] and result["finding"]["code"] == "E_APT_KEY", result
        assert ("the nvidia repository's signing key at %s has the fingerprint %s, not the pinned %s; nothing was "
                "installed" % (source["key_url"], TEST_FPR, OTHER_FPR)) in result["msg"]
        assert result["finding"]["details"] == {"url": source["key_url"], "pinned": OTHER_FPR, "found": [TEST_FPR]}
        assert not os.path.exists("/etc/apt/keyrings/gpuserve-nvidia.gpg")
    missing = run_module("apt_packages", tmp_path, sources=[dict(source, key_url=str(tmp_path / "nokey"))])
    assert missing["finding"]["code"] == "E_APT_KEY" and "could not be fetched" in missing["msg"]
    html = tmp_path / "page.html"
    html.write_text("<html>moved</html>")
    page = run_module("apt_packages", tmp_path, sources=[dict(source, key_url=str(html))])
    assert "is not one: it holds no ASCII-armored OpenPGP public key block" in page["msg"]


class EngineAPI(object):
    """A stand-in for the Docker Engine API on a unix socket: /info, /containers/json, /images/json and
    /containers/NAME/json, answering from self.info, self.containers, self.images, self.inspected (a test double of
    dockerd's answers)."""

    def __init__(self, path):
        self.info = {"LiveRestoreEnabled": False, "DockerRootDir": "/var/lib/docker", "Runtimes": {"runc": {}},
                     "ServerVersion": "20.10.24+dfsg1"}
        self.containers, self.images, self.inspected = [], [], {}
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                path = self.path.split("?")[0]
                body = {"/info": api.info, "/containers/json": api.containers,
                        "/images/json": api.images}.get(path)
                if path.startswith("/containers/") and path.endswith("/json") and path != "/containers/json":
                    body = api.inspected.get(path[len("/containers/"):-len("/json")])
                data = json.dumps(body).encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self):
                request, _addr = self.socket.accept()
                return request, ("local", 0)

        self.server = Server(path, Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine(tmp_path):
    api = EngineAPI(str(tmp_path / "docker.sock"))
    yield api, "unix://" + str(tmp_path / "docker.sock")
    api.close()


def container(name, own=False, state="running"):
    return {"Id": name * 4, "Names": ["/" + name], "State": state,
            "Labels": {"gpuserve.llm.service": "gpuserve-llm"} if own else {}}


def test_the_guard_reads_the_daemon_and_refuses_naming_what_it_would_stop_or_strand(engine, tmp_path):
    api, host = engine
    api.containers = [container("gpuserve-llm-a", own=True), container("foreign-job"), container("old", state="exited")]
    api.images = [{"Id": "sha256:" + "a" * 64, "RepoTags": ["gpuserve/llama.cpp:1-0.7.0"]},
                  {"Id": "sha256:" + "b" * 64, "RepoTags": None}]
    read = run_module("docker_daemon", tmp_path, docker_host=host)
    assert read["answers"] is True and read["live_restore"] is False and read["changed"] is False
    assert read["containers"][0] == {"name": "gpuserve-llm-a", "state": "running", "own": True}
    restart = run_module("docker_daemon", tmp_path, docker_host=host, guard="restart")
    assert restart["failed"] and restart["finding"]["code"] == "E_DOCKER_RESTART"
    assert "would stop 1 container(s) the collection does not own: foreign-job (live-restore is off)" in restart["msg"]
    api.info["LiveRestoreEnabled"] = True
    assert run_module("docker_daemon", tmp_path, docker_host=host, guard="restart")["guard"]["go"] is True
    moved = run_module("docker_daemon", tmp_path, docker_host=host, guard="data_root")
    assert moved["finding"]["details"]["containers"] == ["foreign-job"]
    assert moved["finding"]["details"]["images"] == ["bbbbbbbbbbbb", "gpuserve/llama.cpp:1-0.7.0"]
    allowed = run_module("docker_daemon", tmp_path, docker_host=host, guard="data_root", policy="allow")
    assert allowed["guard"]["go"] and allowed["guard"]["stops"] == ["foreign-job", "gpuserve-llm-a"]


def test_no_daemon_answering_is_read_as_such_and_guards_nothing(tmp_path):
    got = run_module("docker_daemon", tmp_path, docker_host="unix://" + str(tmp_path / "none.sock"), guard="package",
                     reload=True)
    assert got["answers"] is False and got["guard"]["go"] is True and got["reloaded"] is False


def test_a_reload_is_a_sighup_to_dockerds_pid_and_the_configuration_is_waited_for(engine, tmp_path):
    api, host = engine
    flag = tmp_path / "hup"
    # A stand-in dockerd that, on SIGHUP, writes a flag file (its reload).
    child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\n"
                              "signal.signal(signal.SIGHUP, lambda *a: open(sys.argv[1], 'w').write('reloaded'))\n"
                              "time.sleep(30)\n", str(flag)])
    try:
        pidfile = tmp_path / "docker.pid"
        pidfile.write_text(str(child.pid))
        time.sleep(0.3)
        check = run_module("docker_daemon", tmp_path, check=True, docker_host=host, reload=True, pidfile=str(pidfile),
                           expect={"live_restore": True})
        assert check["changed"] and check["reloaded"] and not flag.exists()  # check mode sends nothing, waits for nothing
        threading.Timer(1.0, lambda: api.info.update(LiveRestoreEnabled=True, Runtimes={"runc": {}, "nvidia": {}})).start()
        done = run_module("docker_daemon", tmp_path, docker_host=host, reload=True, pidfile=str(pidfile),
                          expect={"live_restore": True, "runtimes": ["nvidia"]}, timeout=10)
        assert done["changed"] and done["live_restore"] is True and "nvidia" in done["runtimes"], done
        for _attempt in range(20):
            if flag.exists():
                break
            time.sleep(0.1)
        assert flag.read_text() == "reloaded"
        late = run_module("docker_daemon", tmp_path, docker_host=host, expect={"data_root": "/data/docker"}, timeout=1)
        assert late["finding"]["code"] == "E_DOCKER"
        assert "does not show its configuration after 1 s: its data root is /var/lib/docker, not /data/docker" in late["msg"]
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait()


def test_the_slots_inspect_is_one_module_run_with_a_null_for_a_slot_that_holds_none(engine, tmp_path):
    """gpuserve.llm.container_inspect (the service stage's two slots): each name's inspect document in order, null
    for a name the daemon does not know; a daemon that does not answer is E_DOCKER naming it."""
    api, host = engine
    serving = {"Id": "b" * 64, "State": {"Running": True},
               "Config": {"Env": ["LLAMA_API_KEY=k"], "Labels": {"gpuserve.llm.config": "c" * 16}}}
    api.inspected = {"gpuserve-llm-b": serving}
    result = run_module("container_inspect", tmp_path, names=["gpuserve-llm-a", "gpuserve-llm-b"], docker_host=host)
    assert not result.get("failed") and not result["changed"], result
    assert result["containers"] == [None, serving]
    gone = run_module("container_inspect", tmp_path, names=["gpuserve-llm-a"],
                      docker_host="unix://" + str(tmp_path / "none.sock"))
    assert gone["failed"] and gone["finding"]["code"] == "E_DOCKER", gone
    assert gone["finding"]["subject"] == "unix://" + str(tmp_path / "none.sock")


def test_the_host_read_is_one_module_run_that_shows_a_configured_host_needing_nothing(engine, tmp_path, monkeypatch):
    """host_read: the distribution facts, the installed Docker Engine (dpkg), what daemon.json's merge and the nvidia
    runtime would change, and whether the daemon shows the configuration; on a host already configured, every plan
    is "none" and the daemon shows it: the stage's writes and waits are skipped (roles/host/tasks/main.yml)."""
    api, host = engine
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "dpkg-query"  # a stand-in dpkg: docker.io installed, docker-ce removed, moby-engine unknown
    fake.write_text("#!/bin/sh\nprintf 'docker.io installed\\ndocker-ce config-files\\n'\n"
                    "echo 'dpkg-query: no packages found matching moby-engine' >&2; exit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, os.environ["PATH"]))
    conf = tmp_path / "daemon.json"
    conf.write_text('{"log-driver": "journald"}')
    expect = {"live_restore": True, "runtimes": ["nvidia"], "data_root": "/data/docker"}
    args = dict(docker_host=host, daemon_json=str(conf), data_root="/data/docker", nvidia_runtime=True, expect=expect)
    first = run_module("host_read", tmp_path, **args)
    assert first["changed"] is False and first["engines"] == ["docker.io"], first
    with open("/etc/os-release") as f:
        release = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    assert first["ansible_facts"]["distribution_release"] == release.get("VERSION_CODENAME", "").strip('"'), first
    assert first["ansible_facts"]["distribution"] and first["ansible_facts"]["distribution_major_version"], first
    assert [c["key"] for c in first["daemon_json"]["changes"]] == ["live-restore", "data-root"]
    assert first["daemon_json"]["apply"] == "restart" and first["daemon_json"]["created"] is False
    # The runtime is planned over the merged file: it alone is left for the registration.
    assert [c["key"] for c in first["runtime"]["changes"]] == ["runtimes.nvidia"] and first["runtime"]["apply"] == "reload"
    assert first["daemon"]["answers"] and not first["daemon"]["shows"], first
    assert first["daemon"]["differs"] == ["live-restore is False, not True",
                                          "the runtimes nvidia are missing (it has runc)",
                                          "its data root is /var/lib/docker, not /data/docker"]
    assert json.loads(conf.read_text()) == {"log-driver": "journald"}  # a read: nothing written

    conf.write_text(json.dumps({"log-driver": "journald", "live-restore": True, "data-root": "/data/docker",
                                "runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}}}))
    api.info.update(LiveRestoreEnabled=True, DockerRootDir="/data/docker", Runtimes={"runc": {}, "nvidia": {}})
    again = run_module("host_read", tmp_path, **args)
    assert again["daemon_json"]["apply"] == "none" and again["runtime"]["apply"] == "none", again
    assert again["daemon"]["shows"] and again["daemon"]["differs"] == [], again

    conf.write_text('{"live-restore": true,')
    broken = run_module("host_read", tmp_path, **args)
    assert broken["failed"] and broken["finding"]["code"] == "E_DAEMON_JSON", broken
    assert "the Docker daemon's configuration %s is left as it is" % conf in broken["msg"], broken
    relative = run_module("host_read", tmp_path, **dict(args, data_root="data/docker"))
    assert relative["finding"]["code"] == "E_CONFIG", relative
    assert "data_root is 'data/docker'; allowed: an absolute path" in relative["msg"], relative
    none = run_module("host_read", tmp_path, docker_host="unix://" + str(tmp_path / "none.sock"),
                      daemon_json=str(tmp_path / "absent.json"), expect=expect)
    assert none["daemon"]["answers"] is False and not none["daemon"]["shows"], none
    assert none["daemon_json"]["created"] is True and none["runtime"]["apply"] == "none", none
