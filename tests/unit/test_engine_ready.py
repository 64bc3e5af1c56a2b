"""engine_ready against a stand-in engine and Docker daemon (one local HTTP server answering both):
what the service stage shows when an engine is ready, fails its smoke request, or never gets healthy."""
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "plugins", "modules", "engine_ready.py")
KEY = "sk-unit-SECRET"


class StandIn(BaseHTTPRequestHandler):
    """The engine (/health, /slots, /v1/chat/completions) and the Docker Engine API (inspect, logs)."""
    state = {}

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
            self.answer(200, json.dumps({"State": container, "Config": {"Tty": True}, "RestartCount": 0}))
        elif self.path.startswith("/containers/c1/logs"):
            self.answer(200, "loading\nerror: out of memory\nexiting\n", "text/plain")
        else:
            self.answer(404, "{}")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != "Bearer " + KEY:
            self.answer(401, '{"error": {"message": "Invalid API Key"}}')
        else:
            self.answer(200, json.dumps({"choices": [{"message": {"content": "Hello from " + body["model"]},
                                                      "finish_reason": "stop"}]}))


@pytest.fixture
def stand_in():
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def ready(tmp_path, port, health=200, container=None, **args):
    StandIn.state = {"health": health, "container": {"Running": True} if container is None else container}
    args = dict(dict(url="http://127.0.0.1:%d/" % port, engine="llamacpp", container="c1", model="tiny",
                     docker_host="tcp://127.0.0.1:%d" % port, api_key=KEY, timeout=2, interval=0.2, log_lines=2),
                **args)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    out = subprocess.run([sys.executable, MODULE, str(path)], stdout=subprocess.PIPE, text=True, check=False,
                         env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    return json.loads(out.stdout)


def test_a_healthy_engine_answers_the_smoke_request_and_gives_its_pool(tmp_path, stand_in):
    result = ready(tmp_path, stand_in)
    assert not result.get("failed") and not result["changed"]
    assert result["reply"] == {"content": "Hello from tiny", "finish_reason": "stop"}
    assert result["pool"] is not None


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


def test_an_engine_never_healthy_is_e_health_naming_the_last_answer(tmp_path, stand_in):
    loading = ready(tmp_path, stand_in, health=503)
    assert loading["finding"]["code"] == "E_HEALTH"
    assert "/health did not answer 200 within 2 s (last: HTTP 503: {\"error\": \"Loading model\"})" in loading["msg"]
    nothing = ready(tmp_path, stand_in, url="http://127.0.0.1:9")
    assert "(last: [Errno 111] Connection refused)" in nothing["msg"]
    assert KEY not in json.dumps(nothing) and KEY not in json.dumps(loading)
