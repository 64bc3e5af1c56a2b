"""engine_ready against a stand-in engine and Docker daemon (one local HTTP server answering both) and a
fixture procfs saying who holds the engine's port: what the service stage shows when an engine is ready,
fails its smoke request, never gets healthy, crash-loops, or when another process answers on its port."""
import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import port_owner
from sysfs_tree import make_proc

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "engine_ready.py")
KEY = "sk-unit-SECRET"
CID = "3ef82675eac6310f113dacffacfa00d29bf1f311c2e38813167002af78f1b404"
SHIM, ENGINE_PID, WORKER_PID, SQUATTER_PID = 4000, 4100, 4101, 777


class StandIn(BaseHTTPRequestHandler):
    """The engine (/health, /slots, /v1/chat/completions) and the Docker Engine API (inspect, logs).
    state: health (the status /health answers), container (the inspect's State), and optionally inspects (whole
    inspect documents answered in turn, the last one from then on) and message (the smoke reply's message)."""
    state = {}

    def inspect_document(self):
        if self.state.get("inspects"):
            return self.state["inspects"].pop(0) if len(self.state["inspects"]) > 1 else self.state["inspects"][0]
        return {"Id": CID, "State": self.state["container"], "Config": {"Tty": True}, "RestartCount": 0}

    def log_message(self, *_args):
        pass

    def answer(self, status, body, ctype="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (the http.server name)
        container = self.state["container"]
        if self.path == "/health":
            self.answer(self.state["health"], '{"error": "Loading model"}' if self.state["health"] != 200 else "{}")
        elif self.path == "/slots":
            self.answer(200, json.dumps([{"id": 0, "n_ctx": 4096}]))
        elif self.path == "/containers/c1/json" and container is not None:
            self.answer(200, json.dumps(self.inspect_document()))
        elif self.path.startswith("/containers/c1/logs"):
            self.answer(200, "loading\nerror: out of memory\nexiting\n", "text/plain")
        else:
            self.answer(404, "{}")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self.answer(401, '{"error": {"message": "Invalid API Key"}}')
        else:
            message = self.state.get("message", {"content": "Hello from " + body["model"]})
            self.answer(200, json.dumps({"choices": [{"message": message, "finish_reason": "stop"}]}))


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def fake_proc(root, port, holder=ENGINE_PID, engine_cgroup="0::/system.slice/docker-%s.scope" % CID):
    """A procfs where `holder` (a pid, or None: nothing listens) holds the socket listening on 127.0.0.1:port:
    init, the container's shim, its main process (ENGINE_PID, the inspect's State.Pid) and a child of it
    (WORKER_PID), both in `engine_cgroup`, and a process outside it (SQUATTER_PID)."""
    make_proc(str(root), listeners=[("127.0.0.1", port)] if holder else [])  # the socket's inode: 1000
    engine = "llama-server --host 127.0.0.1 --port %d" % port
    processes = {1: (0, "/sbin/init", "0::/init.scope"),
                 SHIM: (1, "containerd-shim-runc-v2 -namespace moby -id " + CID, "0::/system.slice/docker.service"),
                 ENGINE_PID: (SHIM, engine, engine_cgroup), WORKER_PID: (ENGINE_PID, engine, engine_cgroup),
                 SQUATTER_PID: (1, "python3 -m http.server --bind 127.0.0.1 %d" % port, "0::/user.slice/session-3.scope")}
    for pid, (ppid, command, cgroup) in processes.items():
        folder = root / str(pid)
        (folder / "fd").mkdir(parents=True)
        (folder / "cmdline").write_bytes(command.replace(" ", "\0").encode() + b"\0")
        name = os.path.basename(command.split()[0])[:15]
        (folder / "stat").write_text("%d (%s) S %d %d %d 0 -1 4194560 0 0 0 0\n" % (pid, name, ppid, pid, pid))
        (folder / "cgroup").write_text(cgroup + "\n")
        os.symlink("/dev/null", str(folder / "fd" / "0"))
        os.symlink("socket:[99%d]" % pid, str(folder / "fd" / "1"))  # a socket of its own, not the port's
    if holder:
        os.symlink("socket:[1000]", str(root / str(holder) / "fd" / "7"))
    return root


def ready(tmp_path, port, health=200, container=None, holder=ENGINE_PID, inspects=None, message=None, **args):
    state = {"health": health, "container": dict({"Running": True, "Pid": ENGINE_PID}, **(container or {}))}
    state.update(dict(inspects=inspects) if inspects else {}, **(dict(message=message) if message is not None else {}))
    StandIn.state = state
    proc = tmp_path / "proc"
    if not proc.exists():
        fake_proc(proc, port, holder)
    args = dict(dict(url="http://127.0.0.1:%d/" % port, engine="llamacpp", container="c1", model="tiny",
                     docker_host="tcp://127.0.0.1:%d" % port, api_key=KEY, timeout=2, interval=0.2, log_lines=2,
                     proc_root=str(proc)), **args)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    out = subprocess.run([sys.executable, MODULE, str(path)], stdout=subprocess.PIPE, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    return json.loads(out.stdout)


def inspect(restarts, **state):
    return {"Id": CID, "State": dict({"Running": True, "Pid": ENGINE_PID}, **state), "Config": {"Tty": True},
            "RestartCount": restarts}


def test_a_healthy_engine_answers_the_smoke_request_and_gives_its_pool(tmp_path, stand_in):
    result = ready(tmp_path, stand_in)
    assert not result.get("failed") and not result["changed"]
    assert result["reply"] == {"content": "Hello from tiny", "finish_reason": "stop"}
    assert result["pool"] is not None
    assert result["served_by"] == {"container": "c1", "id": CID[:12], "pid": ENGINE_PID, "restart_count": 0,
                                   "port": stand_in, "holders": [{"pid": ENGINE_PID, "command": (
                                       "llama-server --host 127.0.0.1 --port %d" % stand_in)}]}


def test_a_refused_smoke_request_is_e_smoke_with_the_engines_answer_and_log_end(tmp_path, stand_in):
    result = ready(tmp_path, stand_in, api_key="sk-wrong")
    assert result["failed"] and result["finding"]["code"] == "E_SMOKE"
    assert result["msg"].startswith("E_SMOKE: the smoke request (POST http://127.0.0.1:%d/v1/chat/completions, "
                                    "model tiny) got HTTP 401: {\"error\": {\"message\": \"Invalid API Key\"}}"
                                    % stand_in)
    assert result["msg"].endswith("The engine log's last lines:\nerror: out of memory\nexiting")
    assert result["log_lines"] == result["finding"]["details"]["log_lines"] == ["error: out of memory", "exiting"]


def test_a_container_that_stops_is_e_health_at_once(tmp_path, stand_in):
    stopped = {"Running": False, "ExitCode": 137, "OOMKilled": True}
    result = ready(tmp_path, stand_in, health=503, container=stopped, timeout=60)
    assert result["finding"]["code"] == "E_HEALTH"
    assert "the engine container c1 stopped before it was healthy (exit code 137, out of memory)" in result["msg"]
    assert result["msg"].endswith("The engine log's last lines:\nerror: out of memory\nexiting")


def test_an_engine_never_healthy_is_e_health_naming_the_last_answer(tmp_path, stand_in):
    loading = ready(tmp_path, stand_in, health=503)
    assert loading["finding"]["code"] == "E_HEALTH"
    assert "/health did not answer 200 within 2 s (last: HTTP 503: {\"error\": \"Loading model\"})" in loading["msg"]
    nothing = ready(tmp_path, stand_in, url="http://127.0.0.1:9")
    assert "(last: [Errno 111] Connection refused)" in nothing["msg"]
    assert KEY not in json.dumps(nothing) and KEY not in json.dumps(loading)


# The gate proves that what answers is the container it started (issue 38 item 7).

@pytest.mark.parametrize("holder, cgroup", [
    (WORKER_PID, "0::/system.slice/docker-%s.scope" % CID),  # a child of the main process, the cgroup naming it
    (WORKER_PID, "0::/docker/0a1b2c3d"),  # a Docker daemon in a container: only the process tree shows it
    (ENGINE_PID, "0::/"),  # the container's State.Pid itself
])
def test_the_port_held_by_the_container_or_a_process_under_it_passes(tmp_path, stand_in, holder, cgroup):
    fake_proc(tmp_path / "proc", stand_in, holder, engine_cgroup=cgroup)
    result = ready(tmp_path, stand_in)
    assert not result.get("failed"), result["msg"]
    assert [h["pid"] for h in result["served_by"]["holders"]] == [holder]


def test_another_process_answering_on_the_engines_port_is_e_port_busy_at_once_never_healthy(tmp_path, stand_in):
    """The first bring-up of the issue: a process took the port after preflight; it answers /health 200 while the
    container runs (and cannot bind). The gate names the port, the process and what to do, at the first answer."""
    began = time.time()
    result = ready(tmp_path, stand_in, holder=SQUATTER_PID, timeout=60)
    assert time.time() - began < 30
    assert result["failed"] and result["finding"]["code"] == "E_PORT_BUSY"
    assert result["msg"].startswith(
        "E_PORT_BUSY: port %d, the engine's (http://127.0.0.1:%d/), is held by pid 777 (python3 -m http.server "
        "--bind 127.0.0.1 %d) on 127.0.0.1:%d, not by the engine container c1 (main pid %d): what answers there is "
        "not this engine. Stop that process (kill 777) or set llm_engine_port to a free port, then rerun the "
        "service stage" % (stand_in, stand_in, stand_in, stand_in, ENGINE_PID)), result["msg"]
    assert result["log_lines"] == ["error: out of memory", "exiting"]
    assert "healthy_after_s" not in result and "reply" not in result


def test_a_health_answer_with_no_socket_of_the_container_behind_it_is_not_healthy(tmp_path, stand_in):
    nothing = ready(tmp_path, stand_in, holder=None)
    assert nothing["finding"]["code"] == "E_HEALTH"
    assert ("/health did not answer 200 within 2 s (last: http://127.0.0.1:%d/ answered, but no socket listens on "
            "port %d in %s/net/tcp{,6})" % (stand_in, stand_in, tmp_path / "proc")) in nothing["msg"]
    orphan = tmp_path / "orphan"
    fake_proc(orphan, stand_in, holder=ENGINE_PID)
    os.unlink(str(orphan / str(ENGINE_PID) / "fd" / "7"))  # listed in net/tcp, held by no process
    unheld = ready(tmp_path, stand_in, proc_root=str(orphan))
    assert "no process holds the socket listening on port %d (127.0.0.1:%d)" % (stand_in, stand_in) in unheld["msg"]


def test_a_daemon_in_another_pid_namespace_is_trusted_on_its_state_and_says_what_it_skipped(tmp_path, stand_in):
    """The Docker daemon is in a container or on another machine: the port's socket shows (host networking),
    none of the container's processes do. The gate passes on the container's state with W_CHECK_SKIPPED,
    and a crash-looping container there still fails."""
    proc = fake_proc(tmp_path / "proc", stand_in)
    for pid in (SHIM, ENGINE_PID, WORKER_PID):
        shutil.rmtree(str(proc / str(pid)))
    passed = ready(tmp_path, stand_in)
    assert not passed.get("failed"), passed
    assert passed["served_by"]["holders"] == [] and passed["served_by"]["finding"]["code"] == "W_CHECK_SKIPPED"
    assert ("who holds port %d (127.0.0.1:%d) was not checked: the engine container c1's processes are not visible in "
            "%s" % (stand_in, stand_in, proc)) in passed["served_by"]["finding"]["message"]
    looping = ready(tmp_path, stand_in, container={"Restarting": True})
    assert looping["finding"]["code"] == "E_HEALTH" and "crash-looping" in looping["msg"], looping


def test_a_socket_whose_holders_cannot_be_read_says_the_gate_needs_root(tmp_path, monkeypatch):
    proc = fake_proc(tmp_path / "proc", 28130, SQUATTER_PID)
    listdir = os.listdir

    def no_permission(path):
        if path.endswith("/fd") and not path.endswith("/%d/fd" % ENGINE_PID):
            raise OSError(errno.EACCES, "Permission denied", path)
        return listdir(path)
    monkeypatch.setattr(os, "listdir", no_permission)
    proof = port_owner.owner(str(proc), 28130, "127.0.0.1", CID, ENGINE_PID)
    assert proof["state"] == "unknown" and proof["unreadable"] == 4 and proof["listeners"] == ["127.0.0.1:28130"]


def test_a_restarting_container_is_e_health_with_its_restart_count_even_when_the_port_answers(tmp_path, stand_in):
    """Crash-looping behind a squatter that answers /health 200: the container is looked at first, and the
    failure names the restart count, the process holding the port, and the log's end."""
    result = ready(tmp_path, stand_in, holder=SQUATTER_PID, timeout=60,
                   inspects=[inspect(8, Running=False, Restarting=True, ExitCode=1, Pid=0)])
    assert result["finding"]["code"] == "E_HEALTH"
    assert result["msg"].startswith(
        "E_HEALTH: the engine container c1 is crash-looping before it was healthy: restarting now (restart count 8, "
        "last exit code 1); port %d is held by pid 777 (python3 -m http.server --bind 127.0.0.1 %d) on 127.0.0.1:%d, "
        "a process outside the container, so the engine cannot bind it" % (stand_in, stand_in, stand_in)), result["msg"]
    assert result["msg"].endswith("The engine log's last lines:\nerror: out of memory\nexiting")


def test_a_restart_count_rising_during_the_gate_is_e_health_and_an_old_one_is_not(tmp_path, stand_in):
    rising = ready(tmp_path, stand_in, health=503, timeout=60,
                   inspects=[inspect(2), inspect(2), inspect(3, ExitCode=1)])
    assert rising["finding"]["code"] == "E_HEALTH"
    assert ("the engine container c1 is crash-looping before it was healthy: it exited and was restarted (restart "
            "count 3, 2 when the gate began, last exit code 1)") in rising["msg"]
    # A container serving for days that restarted twice long ago: its count, steady, is the baseline.
    steady = ready(tmp_path, stand_in, inspects=[inspect(2)])
    assert not steady.get("failed") and steady["served_by"]["restart_count"] == 2
    # A container just started (the service stage's new slot) may not have restarted at all.
    fresh = ready(tmp_path, stand_in, inspects=[inspect(1, ExitCode=1)], fresh=True, timeout=60)
    assert fresh["finding"]["code"] == "E_HEALTH" and "(restart count 1, last exit code 1)" in fresh["msg"]


def test_a_container_that_restarts_after_its_smoke_request_fails_the_gate(tmp_path, stand_in):
    # The first look, the health poll, then the look after the smoke request (and the failure's own look).
    result = ready(tmp_path, stand_in, inspects=[inspect(0), inspect(0), inspect(1, ExitCode=139)])
    assert result["finding"]["code"] == "E_HEALTH"
    assert ("the engine container c1 is crash-looping after it answered the smoke request: it exited and was "
            "restarted (restart count 1, last exit code 139)") in result["msg"]


@pytest.mark.parametrize("message", [{"content": None}, {"content": ""}, {"content": " \n"},
                                     {"content": None, "tool_calls": []}, {}])
def test_a_smoke_reply_that_says_nothing_is_e_smoke_with_what_came_back(tmp_path, stand_in, message):
    result = ready(tmp_path, stand_in, message=message)
    assert result["failed"] and result["finding"]["code"] == "E_SMOKE"
    assert ("the smoke request (POST http://127.0.0.1:%d/v1/chat/completions, model tiny) got HTTP 200 but no reply "
            "(no content, tool call or reasoning): {\"choices\": [{\"message\": %s, \"finish_reason\": \"stop\"}]}"
            % (stand_in, json.dumps(message))) in result["msg"]


def test_a_tool_call_or_reasoning_is_a_reply(tmp_path, stand_in):
    call = [{"type": "function", "function": {"name": "hello", "arguments": "{}"}}]
    tool = ready(tmp_path, stand_in, message={"content": None, "tool_calls": call})
    assert not tool.get("failed") and json.loads(tool["reply"]["content"]) == call
    thinking = ready(tmp_path, stand_in, message={"content": None, "reasoning_content": "The user greets me."})
    assert thinking["reply"]["content"] == "The user greets me."


def test_the_real_procfs_names_the_process_holding_a_port():
    """The same reading on this machine's /proc: a socket this test listens on is held by this process."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        mine = port_owner.owner("/proc", port, "127.0.0.1", None, os.getpid())
        assert mine["state"] == "ours" and [h["pid"] for h in mine["ours"]] == [os.getpid()]
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            theirs = port_owner.owner("/proc", port, "127.0.0.1", CID, child.pid)
        finally:
            child.kill()
            child.wait()
        assert theirs["state"] == "other" and theirs["others"][0]["pid"] == os.getpid()
        assert "pytest" in theirs["others"][0]["command"] or "python" in theirs["others"][0]["command"]
        assert port_owner.owner("/proc", port, "127.0.0.2", None, os.getpid())["state"] == "none"


def test_the_containers_main_process_is_known_by_its_cgroup_or_in_a_cgroup_namespace_by_its_program(tmp_path):
    proc = fake_proc(tmp_path / "proc", 28130)
    assert port_owner.sees(str(proc), CID, ENGINE_PID)
    assert not port_owner.sees(str(proc), CID, SQUATTER_PID)  # another process at that pid
    assert not port_owner.sees(str(proc), CID, 4242)  # no such pid here: the daemon's namespace is another
    (proc / str(ENGINE_PID) / "cgroup").write_text("0::/\n")
    assert port_owner.sees(str(proc), CID, ENGINE_PID, "/usr/bin/llama-server")
    assert not port_owner.sees(str(proc), CID, ENGINE_PID, "/usr/bin/vllm")
