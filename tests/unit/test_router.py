"""The router stage's pieces that need no router: its command line against vllm-router 0.1.17's help
(its front: test_front.py), the engines' running-request counts the drain waits on, the fleet URL, and
the settings rules (a policy the router lacks, a router host whose ports collide)."""
import hashlib
import hmac
import json
import os
import re
import time

import pytest
import yaml

from ansible_collections.gpuserve.llm.plugins.filter.engines import fleet_url, router_command
from ansible_collections.gpuserve.llm.plugins.module_utils import engines
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import load_specs, validate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECS = load_specs(ROOT)
with open(os.path.join(ROOT, "roles", "router", "defaults", "main.yml")) as f:
    ROUTER = dict((k, v) for k, v in yaml.safe_load(f).items() if "{{" not in str(v))
with open(os.path.join(ROOT, "tests", "fixtures", "vllm-router-0.1.17-help.txt")) as f:
    HELP = f.read()
with open(os.path.join(ROOT, "roles", "llm", "defaults", "main.yml")) as f:
    LLM = yaml.safe_load(f)


def test_the_router_listens_on_loopback_only_with_the_workers_it_is_given():
    argv = router_command(ROUTER, ["http://10.0.0.5:8020", "http://10.0.0.6:8020"])
    assert argv[:2] == ["python3", "/opt/vllm-router/launch.py"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # its admin endpoints have no authentication
    assert argv[argv.index("--port") + 1] == str(ROUTER["router_admin_port"])
    assert argv[argv.index("--policy") + 1] == "cache_aware"
    assert argv[argv.index("--worker-urls") + 1:] == ["http://10.0.0.5:8020", "http://10.0.0.6:8020"]
    assert "--api-key" not in argv  # the client's header goes through; the engines check it
    assert "--worker-urls" not in router_command(ROUTER, [])


def test_every_router_flag_and_policy_is_in_vllm_router_0_1_17_help():
    argv = router_command(dict(ROUTER, router_policy="round_robin"), ["http://10.0.0.5:8020"])
    flags = set(re.findall(r"(--[a-z][a-z0-9-]+)", HELP))
    assert [a for a in argv if a.startswith("--") and a not in flags] == []
    known = re.search(r"--policy \{([^}]+)\}", HELP).group(1).split(",")
    assert set(SPECS.options["router_policy"]["choices"]) <= set(known)


@pytest.mark.parametrize("engine, text, running", [
    # The requests an engine holds: those running and those queued (llama.cpp's deferred wait for a slot,
    # which /slots does not show: it is not read).
    ("llamacpp", "llamacpp:requests_processing 2\nllamacpp:requests_deferred 6\n", 8),
    ("llamacpp", "llamacpp:requests_processing 0\nllamacpp:requests_deferred 0\n", 0),
    ("llamacpp", json.dumps([{"id": 0, "is_processing": True}]), None),
    ("vllm", 'vllm:num_requests_running{engine="0",model_name="m"} 3.0\nvllm:num_requests_waiting{} 1\n', 4),
    ("sglang", "sglang:num_running_reqs{model_name=\"m\"} 0.0\n", 0),
    ("sglang", "sglang:num_running_reqs{model_name=\"m\"} 1.0\nsglang:num_queue_reqs{model_name=\"m\"} 2.0\n", 3),
    ("vllm", "other_metric 1\n", None),
    ("llamacpp", "not metrics", None),
])
def test_the_drain_reads_each_engines_running_requests(engine, text, running):
    assert engines.running_requests(engine, text) == running


def test_a_router_reaches_an_engine_at_its_bind_or_at_the_hosts_address():
    assert fleet_url(8020, "10.0.0.5", "gpu1") == "http://10.0.0.5:8020"
    assert fleet_url(8020, "0.0.0.0", "gpu1.example") == "http://gpu1.example:8020"
    assert fleet_url(8020, "::", "fd00::5") == "http://[fd00::5]:8020"
    assert fleet_url(8020, "0.0.0.0", "gpu1.example", True) == "https://gpu1.example:8020"  # a front with llm_tls


def _findings(groups, **settings):
    given = dict(LLM, llm_context=LLM["llm_model_max_context"], llm_model_dense="fp8", llm_engine_port=18020)
    given.update(settings)
    return [f for f in validate(given, SPECS.options, SPECS.internal, groups)[0] if f["severity"] == "error"]


def test_a_policy_the_router_lacks_is_refused_naming_the_choices():
    [found] = _findings(["llm_routers"], router_policy="least_busy")
    assert found["code"] == "E_CONFIG" and found["subject"] == "router_policy"
    assert "one of cache_aware, round_robin" in found["message"]


def test_a_router_host_that_is_a_worker_on_the_same_port_is_refused():
    [found] = _findings(["llm_hosts", "llm_routers"], llm_port=8000, router_port=8000)
    assert found["code"] == "E_CONFIG" and found["subject"] == "router_port"
    assert "a router (llm_routers) and a worker (llm_hosts) on the same port: router_port and llm_port are both 8000" \
        in found["message"]
    [admin] = _findings(["llm_hosts", "llm_routers"], llm_port=8001)  # the router's own port, by its default
    assert admin["subject"] == "router_admin_port"
    assert _findings(["llm_hosts"], llm_port=8000) == []  # no router here
    assert _findings(["llm_hosts", "llm_routers"], llm_port=8020) == []
    [engine] = _findings(["llm_hosts", "llm_routers"], llm_engine_port=8002)  # the engine's own port clashes too
    assert engine["subject"] == "router_metrics_port" and "router_metrics_port and llm_engine_port are both 8002" \
        in engine["message"]
    [same] = _findings(["llm_routers"], router_port=9000, router_metrics_port=9000)
    assert "a router host needs three different ports" in same["message"]


def _vrrp(routers, groups=("llm_hosts", "llm_routers"), address="10.0.0.5", **settings):
    given = dict(LLM, llm_context=LLM["llm_model_max_context"], llm_model_dense="fp8", llm_engine_port=18020)
    given.update(dict(router_vrrp_address=address) if address else {}, **settings)
    return [f for f in validate(given, SPECS.options, SPECS.internal, list(groups), routers=routers)[0]
            if f["severity"] == "error"]


def test_two_router_hosts_need_one_address_of_their_own():
    [found] = _vrrp(["gpu1", "gpu2"])
    assert (found["code"], found["subject"]) == ("E_CONFIG", "router_vip")
    assert "llm_routers has 2 hosts (gpu1, gpu2): they serve one endpoint on one address, router_vip" in found["message"]
    assert _vrrp(["gpu1"]) == []  # one router: its host's own address
    assert _vrrp(["gpu1", "gpu2"], groups=["llm_hosts"]) == []  # judged on the router hosts
    assert _vrrp(["gpu1", "gpu2"], router_vip="10.0.0.100") == []
    assert _vrrp(["gpu1", "gpu2"], router_vip="10.0.0.100", llm_docker_host="tcp://127.0.0.1:2375") == []
    assert _vrrp(["gpu1"], llm_docker_host="ssh://root@gpu1") == []  # no router_vip: the check is not there
    # A play without the router role (the weights stage): its settings are judged where they are in scope.
    assert _vrrp(["gpu1", "gpu2"], router_vip="10.0.0.100", address=None) == []


@pytest.mark.parametrize("settings, subject, allowed", [
    (dict(router_vip="vip.example"), "router_vip", "an IPv4 address, or empty"),
    (dict(router_vip="fd00::100"), "router_vip", "an IPv4 address, or empty"),
    (dict(router_vip="10.0.0.100", router_vrrp_address="gpu1.example"), "router_vrrp_address", "IPv4 address"),
    (dict(router_vip="10.0.0.5"), "router_vip", "an address no host holds"),
    (dict(router_vip="10.0.0.100", router_bind="10.0.0.5"), "router_bind", "0.0.0.0 or :: with router_vip"),
    (dict(router_vip="10.0.0.100", router_vrrp_interface="eth0; reboot"), "router_vrrp_interface", "interface"),
    (dict(router_vip="10.0.0.100", router_vrrp_id=256), "router_vrrp_id", "1 to 255"),
    (dict(router_vip="10.0.0.100", router_vrrp_advert_secs=0), "router_vrrp_advert_secs", "0.01"),
    (dict(router_vip="10.0.0.100", llm_docker_host="ssh://root@gpu1"), "llm_docker_host", "unix:// or tcp://"),
])
def test_the_shared_address_settings_are_refused_in_words(settings, subject, allowed):
    [found] = _vrrp(["gpu1", "gpu2"], **settings)
    assert (found["code"], found["subject"]) == ("E_CONFIG", subject), found
    assert allowed in found["message"], found["message"]


def _keepalived(**host):
    from jinja2 import Environment, FileSystemLoader
    env = Environment(loader=FileSystemLoader(os.path.join(ROOT, "roles", "router", "templates")), trim_blocks=True)
    env.filters["regex_replace"] = lambda value, pattern, repl: re.sub(pattern, repl, value)
    values = dict(ROUTER, ansible_managed="managed", inventory_hostname="gpu1.example", router_vip="10.0.0.100",
                  router_vrrp_address="10.0.0.5", router_vrrp_iface="eth0", router_vrrp_priority=150,
                  router_vrrp_peers=["10.0.0.6", "10.0.0.7"])
    values.update(host)
    return env.get_template("keepalived.conf.j2").render(**values)


def test_keepalived_holds_the_address_by_unicast_vrrp_and_never_takes_it_back():
    conf = _keepalived()
    assert "vrrp_version 3" in conf and "state BACKUP" in conf and "nopreempt" in conf
    assert re.search(r"unicast_src_ip 10\.0\.0\.5\n\s+unicast_peer \{\n\s+10\.0\.0\.6\n\s+10\.0\.0\.7\n\s+\}", conf), conf
    assert "10.0.0.100/32 dev eth0" in conf and "interface eth0" in conf and "priority 150" in conf
    assert "advert_int 0.3" in conf and "virtual_router_id 51" in conf
    assert 'script "/usr/bin/python3 -I -S /var/lib/gpuserve/router/router_vrrp_check.py /var/lib/gpuserve/router/check.json"' \
        in conf
    assert re.search(r"interval 1\n\s+timeout \d+\n\s+fall 1\n\s+rise 1", conf)
    assert "track_script {\n    gpuserve_router\n  }" in conf
    assert "router_id gpu1.example" in conf
    # adverts on time on a busy host: the VRRP process before the host's other work
    assert "\n  vrrp_priority -20\n" in conf and not re.search(r"^\s*vrrp_rt_priority", conf, re.M)


CHECK = os.path.join(ROOT, "roles", "router", "files", "router_vrrp_check.py")


class FakeDocker(object):
    """The Docker daemon's API on a unix socket (test plumbing), for the containers named in `state`: a file per
    container ('running <started>' or 'stopped'; none: 404), POST .../start marks it running (and logs it to
    started.log), after the seconds in state/slow-start where it exists; with state/daemon-down the connection is
    closed unanswered."""

    def __init__(self, state):
        import http.server
        import socketserver
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _container(self):
                parts = self.path.split("/")  # /containers/NAME/json or /containers/NAME/start
                return state / parts[2] if len(parts) == 4 and parts[1] == "containers" else None

            def do_GET(self):
                if (state / "daemon-down").exists():
                    self.close_connection = True
                    return None
                path = self._container()
                if path is None or not path.exists():
                    return self._answer(404, {"message": "No such container"})
                words = path.read_text().split()
                running = words[0] == "running"
                return self._answer(200, {"State": {"Running": running, "StartedAt": words[1] if running else
                                                    "0001-01-01T00:00:00Z"}})

            def do_POST(self):
                path = self._container()
                if path is None or not path.exists():
                    return self._answer(404, {"message": "No such container"})
                if (state / "slow-start").exists():  # a busy host's start: seconds
                    time.sleep(float((state / "slow-start").read_text()))
                path.write_text("running started-by-check\n")
                with open(state / "started.log", "a") as log:
                    log.write(path.name + "\n")
                return self._answer(204)

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def get_request(self):
                request, _address = super().get_request()
                return request, ("docker.sock", 0)  # BaseHTTPRequestHandler wants a (host, port)

        self.path = str(state / "docker.sock")
        self.server = Server(self.path, Handler)
        self.url = "unix://" + self.path
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Router(object):
    """A stand-in router's admin listener and front /health (test plumbing): /list_workers, /add_worker,
    /remove_worker as vllm-router answers them, /health that answers `health`, and the front's route for the
    other router hosts (/gpuserve/router-workers: the workers, to the internal key `key` only)."""

    def __init__(self, workers, health=200, key=None):
        import http.server
        import threading
        self.workers, self.health, self.calls, self.key, self.asked = list(workers), health, [], key, []
        self.signing_key = None  # the key its list is signed with: `key` unless set (a stand-in that has no key)
        self.answering = {"/w1/", "/w2/"}  # the workers whose /health is 200
        router = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path == "/list_workers":
                    return self._answer(200, {"urls": router.workers})
                if self.path == "/gpuserve/router-workers":  # a router host's front to its peers
                    router.asked.append(self.headers.get("Authorization"))
                    known = router.key and self.headers.get("Authorization") == "Bearer " + hmac.new(
                        router.key.encode(), b"gpuserve.llm router peers", hashlib.sha256).hexdigest()
                    mac = hmac.new((router.signing_key or router.key).encode(), b"gpuserve.llm router workers\n"
                                   + json.dumps(router.workers).encode(), hashlib.sha256).hexdigest() if known else ""
                    return self._answer(200, {"urls": router.workers, "mac": mac}) if known else self._answer(404, {})
                if self.path.endswith("/health"):  # the front's, and the workers' (healthy: router.answering)
                    worker = 200 if self.path.startswith(tuple(router.answering)) else 503
                    return self._answer(router.health if self.path == "/health" else worker, {})
                return self._answer(404, {})

            def do_POST(self):
                from urllib.parse import parse_qs, urlsplit
                parts = urlsplit(self.path)
                url = parse_qs(parts.query)["url"][0]
                router.calls.append((parts.path, url))
                if parts.path == "/add_worker":
                    router.workers.append(url)
                elif parts.path == "/remove_worker":
                    router.workers.remove(url)
                return self._answer(200, {})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def host(tmp_path):
    """A router host for the check: its state folder, a Docker daemon's API for its containers, the configuration."""
    state = tmp_path / "state"
    state.mkdir()
    for name in ("gpuserve-router", "gpuserve-router-front"):
        (state / name).write_text("running 2026-12-03T10:00:00Z\n")
    daemon = FakeDocker(state)
    router = Router([])
    config = {"containers": ["gpuserve-router", "gpuserve-router-front"], "router": "gpuserve-router",
              "admin": router.url, "health": router.url + "/health", "cafile": "", "state_dir": str(state),
              "docker": daemon.url}
    (state / "check.json").write_text(json.dumps(config))
    yield state, router
    router.close()
    daemon.close()


def check(state, *event):
    import subprocess
    import sys
    got = subprocess.run([sys.executable, CHECK, str(state / "check.json")] + list(event), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=60, check=False)
    return got.returncode, got.stderr


def test_the_check_holds_the_address_while_the_front_answers_and_records_the_workers(host):
    state, router = host
    router.workers = [router.url + "/w1/", router.url + "/w2/"]
    assert check(state) == (0, "gpuserve router check: may hold the address: its front answers\n")
    assert check(state) == (0, "")  # said once, when the verdict changed
    assert json.loads((state / "workers.json").read_text()) == {
        "started": "2026-12-03T10:00:00Z", "workers": sorted(router.workers)}
    router.health = 503  # the router has no healthy worker: the front's /health says so
    assert check(state)[0] == 1
    (state / "stopped").write_text("")  # stop.yml: nothing started, no address held
    router.health = 200
    assert check(state)[0] == 1


def test_a_killed_router_is_started_again_and_given_back_its_live_workers_before_it_holds_the_address(host):
    state, router = host
    w1, w2, w3 = router.url + "/w1/", router.url + "/w2/", router.url + "/w3/"
    router.workers = [w1, w2, w3]
    assert check(state)[0] == 0  # recorded: w1, w2 and w3 (w3's engine has since stopped answering)
    (state / "gpuserve-router").write_text("stopped\n")  # docker kill: no restart policy brings it back
    (state / "slow-start").write_text("2")
    asked = time.monotonic()
    code, said = check(state)
    took = time.monotonic() - asked
    # The address given up at once: the verdict does not wait on the start (2 s here), which goes on in a child
    assert code == 1 and "gpuserve-router was not running: starting it again" in said and took < 1.5, (took, said)
    code, said = check(state)  # the start under way: not a second one
    assert code == 1 and "gpuserve-router was not running: a start is already under way" in said, said
    started_log = started(state)
    assert started_log == ["gpuserve-router"], started_log
    assert "gpuserve-router started again (ok)" in (state / "check.log").read_text()
    (state / "slow-start").unlink()
    router.workers = [router.url + "/old/"]  # what it was started with: the workers of its first start
    code, said = check(state)  # its container started again since the record: the workers put back first
    assert code == 1 and "workers restored" in said, said
    assert sorted(router.workers) == [w1, w2]  # w3 does not answer /health: not added; /old/ not recorded: out
    assert ("/add_worker", w3) not in router.calls
    assert ("/add_worker", w1) in router.calls and ("/remove_worker", router.url + "/old/") in router.calls
    assert check(state)[0] == 0  # from now on it may hold the address
    assert json.loads((state / "workers.json").read_text())["started"] == "started-by-check"


def test_a_front_that_stopped_is_started_again_and_the_address_given_up_meanwhile(host):
    state, router = host
    (state / "gpuserve-router-front").write_text("stopped\n")
    code, said = check(state)
    assert code == 1 and "gpuserve-router-front was not running: starting it again" in said
    assert started(state) == ["gpuserve-router-front"]
    assert check(state)[0] == 0


def started(state, timeout=10):
    """The containers the check's child started (started.log), once a start has ended and no lock is held."""
    import fcntl
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (state / "started.log").exists() and (state / "start.lock").exists():
            with open(state / "start.lock") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    time.sleep(0.05)
                    continue
            return (state / "started.log").read_text().split()
        time.sleep(0.05)
    return None


def test_a_check_that_cannot_tell_keeps_the_verdict_two_times_and_gives_the_address_up_the_third(host):
    state, router = host
    assert check(state)[0] == 0
    config = json.loads((state / "check.json").read_text())
    healthy_front = config["health"]
    config["health"] = "http://127.0.0.1:%d/health" % free_port()  # the front does not answer (refused)
    (state / "check.json").write_text(json.dumps(config))
    assert [check(state)[0] for _check in range(3)] == [0, 0, 1]
    assert check(state)[0] == 1
    config["health"] = healthy_front
    (state / "check.json").write_text(json.dumps(config))
    assert check(state)[0] == 0
    # The Docker daemon does not answer (starved, or restarting): a doubt too, and nothing is started
    (state / "daemon-down").write_text("")
    assert [check(state)[0] for _check in range(2)] == [0, 0]
    (state / "daemon-down").unlink()
    assert check(state)[0] == 0 and not (state / "started.log").exists()
    (state / "gpuserve-router").write_text("stopped\n")  # an answer, not a doubt: given up at once
    assert check(state)[0] == 1
    assert started(state) == ["gpuserve-router"]
    log = (state / "check.log").read_text()
    assert re.search(r"^\d{4}-\d\d-\d\dT[\d:.]+Z may hold the address: its front answers$", log, re.M), log
    assert "could not tell (1 of 3 in a row), keeps its verdict 0: the front's /health did not answer:" in log
    assert "gives the address up: 3 checks in a row could not tell (the last: the front's /health did not" in log
    assert re.search(r"could not tell \(2 of 3 in a row\), keeps its verdict 0: the Docker daemon \(unix://\S+/docker"
                     r"\.sock\) did not answer GET /containers/gpuserve-router/json: ", log), log
    # the last three lines without their time stamps, in any order (the start's child writes beside the check)
    said_last = sorted(line.split(" ", 1)[1] for line in log.rstrip().split("\n")[-3:])
    assert log.count("gives the address up") == 2 and said_last == [
        "gives the address up: gpuserve-router was not running", "gpuserve-router started again (ok)",
        "gpuserve-router was not running: starting it again"], log
    assert check(state, "backup") == (0, "gpuserve router check: keepalived: this host is BACKUP now\n")


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_keepalived_takes_out_the_dead_workers_when_it_takes_the_address():
    conf = _keepalived()
    for event in ("master", "backup", "fault"):  # master: the dead workers out; each: the state in check.log
        assert 'notify_%s "/usr/bin/python3 -I -S /var/lib/gpuserve/router/router_vrrp_check.py ' \
            '/var/lib/gpuserve/router/check.json %s"' % (event, event) in conf, conf


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Engine(object):
    """A stand-in engine whose host is back (test plumbing): /health answers 200 on its port."""

    def __init__(self, port):
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200 if self.path == "/health" else 404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_on_taking_the_address_the_workers_whose_host_is_gone_go_out_and_come_back_when_they_answer(host):
    state, router = host
    w1, w2, w3 = router.url + "/w1/", router.url + "/w2/", router.url + "/w3/"
    port = _free_port()
    gone = "http://127.0.0.1:%d" % port  # its host stopped with the router host that held the address
    router.workers = [w1, w2, w3, gone]
    assert check(state)[0] == 0
    code, said = check(state, "master")
    assert code == 0 and "took out the workers whose host took no connection in 0.5 s: %s" % gone in said, said
    # w3 takes connections but its /health is 503: the router's own health checks are for that, not this notice
    assert sorted(router.workers) == [w1, w2, w3] and router.calls == [("/remove_worker", gone)]
    assert json.loads((state / "evicted.json").read_text()) == [gone]
    assert check(state) == (0, "")  # still gone: noted, not put back; the record keeps it for a router started again
    assert json.loads((state / "workers.json").read_text())["workers"] == sorted([w1, w2, w3, gone])
    engine = Engine(port)  # its host is back
    try:
        code, said = check(state)
    finally:
        engine.close()
    assert code == 0 and "answering again, put back: %s" % gone in said, said
    assert sorted(router.workers) == sorted([w1, w2, w3, gone]) and json.loads((state / "evicted.json").read_text()) == []


def test_a_worker_the_plays_took_out_while_it_was_evicted_is_not_put_back(host):
    from ansible_collections.gpuserve.llm.plugins.modules.router_workers import forget_evicted
    state, router = host
    w1 = router.url + "/w1/"
    ports = [_free_port(), _free_port()]
    w3, w4 = ["http://127.0.0.1:%d" % p for p in ports]
    router.workers = [w1, w3, w4]
    assert check(state, "master")[0] == 0
    assert json.loads((state / "evicted.json").read_text()) == sorted([w3, w4])
    # leave.yml (router_workers, absent: w3) names it: dropped from the note, whatever the router holds
    assert forget_evicted(str(state / "evicted.json"), {w3}, False) == [w3]
    engines = [Engine(p) for p in ports]
    try:
        code, said = check(state)
    finally:
        for e in engines:
            e.close()
    assert code == 0 and sorted(router.workers) == sorted([w1, w4]), (router.workers, said)
    assert ("/add_worker", w3) not in router.calls
    assert forget_evicted(str(state / "evicted.json"), set(), True) == []  # exact: every one (none left)
    assert forget_evicted(str(state / "no-such.json"), {w3}, True) == []


def test_a_recorded_worker_that_does_not_answer_when_the_router_is_restored_is_noted_not_lost(host):
    state, router = host
    w1 = router.url + "/w1/"
    port = _free_port()
    gone = "http://127.0.0.1:%d" % port
    router.workers = [w1, gone]
    assert check(state)[0] == 0
    (state / "gpuserve-router").write_text("running 2026-12-03T12:00:00Z\n")  # started again by its daemon
    router.workers = []
    code, said = check(state)
    assert code == 1 and sorted(router.workers) == [w1] and json.loads((state / "evicted.json").read_text()) == [gone]
    engine = Engine(port)
    try:
        assert check(state)[0] == 0
    finally:
        engine.close()
    assert sorted(router.workers) == sorted([w1, gone])


def test_a_router_the_plays_start_is_recorded_anew_never_given_the_old_ones_workers(host):
    state, router = host
    w1, w2 = router.url + "/w1/", router.url + "/w2/"
    router.workers = [w1, w2]
    # main.yml marks the container it replaces; a check before the new one starts records nothing from the old
    (state / "workers.json").write_text(json.dumps({"replacing": "2026-12-03T10:00:00Z"}))
    assert check(state)[0] == 0
    assert json.loads((state / "workers.json").read_text()) == {"replacing": "2026-12-03T10:00:00Z"}
    (state / "gpuserve-router").write_text("running 2026-12-03T11:00:00Z\n")  # the plays' new container
    router.workers = [w1]  # started with the LIVE hosts of the run (w2 failed in it)
    assert check(state) == (0, "")
    assert router.calls == []  # nothing put back: w2 stays out
    assert json.loads((state / "workers.json").read_text()) == {"started": "2026-12-03T11:00:00Z", "workers": [w1]}


def test_while_the_plays_replace_the_router_the_check_does_not_start_the_old_one(host):
    state, router = host
    (state / "workers.json").write_text(json.dumps({"replacing": "2026-12-03T10:00:00Z"}))
    (state / "gpuserve-router").write_text("stopped\n")  # removed by docker_container's recreate
    assert check(state)[0] == 1
    assert not (state / "started.log").exists()  # the plays start the new one
    assert json.loads((state / "workers.json").read_text()) == {"replacing": "2026-12-03T10:00:00Z"}
    # A run that marked the replacement and ended before it started the new router (interrupted, failed): once
    # the mark is older than mark_secs the check starts the router there again, as for any router that stopped.
    config = json.loads((state / "check.json").read_text())
    (state / "check.json").write_text(json.dumps(dict(config, mark_secs=60)))
    assert check(state)[0] == 1 and not (state / "started.log").exists()  # a fresh mark is still waited for
    os.utime(str(state / "workers.json"), (time.time() - 120, time.time() - 120))
    code, said = check(state)
    assert code == 1 and "a run ended before it started one" in said, said
    assert started(state) == ["gpuserve-router"], said  # the check's child starts it
    assert json.loads((state / "workers.json").read_text()) == {}  # said once, not each second


def test_a_router_host_that_returns_serves_the_workers_its_peer_serves_not_only_those_it_recorded(host):
    state, router = host
    w1, w2, w3 = router.url + "/w1/", router.url + "/w2/", router.url + "/w3/"
    router.workers, router.answering = [w1, w3], {"/w1/", "/w2/", "/w3/"}
    config = json.loads((state / "check.json").read_text())
    config["published"] = str(state / "router-workers.json")  # in the front's folder: what the peers are given
    (state / "check.json").write_text(json.dumps(config))
    assert check(state)[0] == 0  # recorded: w1 and w3, and published for the other router hosts
    assert json.loads((state / "router-workers.json").read_text()) == {"urls": [w1, w3]}  # no key: not signed
    assert (state / "router-workers.json").stat().st_mode & 0o777 == 0o644
    # While this host was down the plays added w2 and took w3 out (its engine still answers): the peer serves
    # w1 and w2. The host comes back: its router starts with what it had, its check asks the peer's front.
    peer = Router([w1, w2], key="sk-internal-0123456789")
    config = json.loads((state / "check.json").read_text())
    config.update(peers=["127.0.0.1"], peer_url=peer.url.replace("127.0.0.1", "{}") + "/gpuserve/router-workers",
                  key_file=str(state / "internal.key"))
    (state / "check.json").write_text(json.dumps(config))
    (state / "internal.key").write_text("sk-internal-0123456789\n")
    (state / "evicted.json").write_text(json.dumps([w3]))  # noted here before it went down
    try:
        (state / "gpuserve-router").write_text("running 2026-12-04T09:00:00Z\n")
        code, said = check(state)
        assert code == 1 and "workers restored (as the other router hosts serve them)" in said, said
        # asked with the peers' token, an HMAC of the internal key: never the key itself
        assert sorted(router.workers) == [w1, w2] and len(peer.asked) == 1 and "sk-internal" not in peer.asked[0]
        assert "sk-internal" not in said
        assert json.loads((state / "evicted.json").read_text()) == []  # w3, noted before, is out of the fleet
        assert json.loads((state / "workers.json").read_text())["workers"] == [w1, w2]
        assert check(state)[0] == 0  # then it may hold the address
        # published signed under the internal key now that there is one: what this host's peers check
        listed = json.loads((state / "router-workers.json").read_text())
        mac = hmac.new(b"sk-internal-0123456789", b"gpuserve.llm router workers\n" + json.dumps([w1, w2]).encode(),
                       hashlib.sha256).hexdigest()
        assert listed == {"urls": [w1, w2], "mac": mac}
        # Something answering at a peer's address with the peers' token (it learnt it from this host's asking) but
        # not the key: its list, a worker of its own among them, is not taken; the record here is.
        foreign = router.url + "/foreign/"
        peer.workers, peer.signing_key = [w1, foreign], "sk-guessed"
        router.answering.add("/foreign/")  # it answers /health: taken, it would be a worker
        (state / "gpuserve-router").write_text("running 2026-12-04T09:20:00Z\n")
        router.workers = [w3]
        code, said = check(state)
        assert code == 1 and "is not signed with the internal key: not taken" in said, said
        assert "as recorded here: no other router host answered" in said and sorted(router.workers) == [w1, w2], said
        assert foreign not in router.workers
        peer.workers, peer.signing_key = [w1, w2], None
        # A peer that does not know the key (or none that answers): the record here, said so.
        peer.key = "sk-another"
        (state / "gpuserve-router").write_text("running 2026-12-04T09:30:00Z\n")
        router.workers = [w3]
        code, said = check(state)
        assert code == 1 and "as recorded here: no other router host answered" in said, said
        assert sorted(router.workers) == [w1, w2]
    finally:
        peer.close()


def _check_module():
    """The check script as a module (its HTTP in a few lines, not http.client: keepalived starts it each second)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("router_vrrp_check", CHECK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _one_answer(listener, answer, pause=0.0):
    """Serves one connection on `listener`: reads the request, sends `answer` (bytes, or a list sent apart with
    `pause` between), closes."""
    import threading

    def serve():
        conn, _address = listener.accept()
        request = b""
        while b"\r\n\r\n" not in request:
            request += conn.recv(4096)
        served.append(request)
        for part in answer if isinstance(answer, list) else [answer]:
            conn.sendall(part)
            time.sleep(pause)
        conn.close()
    served = []
    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return served, thread


def test_the_checks_http_reads_chunked_and_sized_answers_and_refuses_cut_or_foreign_ones(tmp_path):
    import socket
    check = _check_module()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        url = "http://127.0.0.1:%d/list_workers" % listener.getsockname()[1]
        body = json.dumps({"urls": ["http://10.0.0.%d:28020" % n for n in range(200)]}).encode()
        # Chunked, as Go's net/http sends an answer it does not size (Docker's inspect), in parts apart in time
        chunked = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(body[i:i + 700]), body[i:i + 700])
                           for i in range(0, len(body), 700)) + b"0\r\n\r\n"
        parts = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n",
                 chunked[:1000], chunked[1000:]]
        served, thread = _one_answer(listener, parts, pause=0.05)
        assert check.ask(url) == (200, body.decode())
        thread.join()
        assert served[0].startswith(b"GET /list_workers HTTP/1.1\r\n") and b"Connection: close" in served[0]
        # Sized by Content-Length; a POST says its empty body's length
        served, thread = _one_answer(listener, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokEXTRA")
        assert check.ask(url.replace("list_workers", "add_worker?url=x"), "POST") == (200, "ok")
        thread.join()
        assert served[0].startswith(b"POST /add_worker?url=x HTTP/1.1") and b"Content-Length: 0" in served[0]
        # Another status is HTTPStatusError, with the status
        _one_answer(listener, b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
        with pytest.raises(check.HTTPStatusError) as raised:
            check.ask(url)
        assert raised.value.code == 503
        # An answer cut short, a chunked one cut, and one that is no HTTP: OSError, never a partial body
        for answer in (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort",
                       b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nonly some",
                       b"SSH-2.0-OpenSSH_9.2\r\n\r\n"):
            _one_answer(listener, answer)
            with pytest.raises(OSError):
                check.ask(url)
    # Nothing listening: OSError naming the URL
    with pytest.raises(OSError, match="127.0.0.1"):
        check.ask(url, timeout=1)


def test_the_checks_docker_calls_read_a_chunked_answer_on_the_unix_socket(tmp_path):
    import socket
    check = _check_module()
    path = str(tmp_path / "docker.sock")
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(path)
        listener.listen(1)
        inspect = json.dumps({"State": {"Running": True, "StartedAt": "2026-12-05T10:00:00Z"}, "Pad": "x" * 5000})
        body = inspect.encode()
        _one_answer(listener, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n"
                    % (len(body), body))
        assert check.running_since({"docker": "unix://" + path}, "gpuserve-router") == "2026-12-05T10:00:00Z"
    # A daemon that does not answer is a Doubt (the check cannot tell), not a verdict
    with pytest.raises(check.Doubt):
        check.running_since({"docker": "unix://" + path}, "gpuserve-router")
