"""The drain's loop (plugins/modules/engine_drain.py), run as Ansible runs it, against a real HTTP server in the
test: an engine's /metrics that answers a scripted sequence of counts, drops a connection, hangs, or refuses
the key; and a stand-in engine that holds a stream open and counts it only once it has reached its loop, as
llama-server does. The drain ends on several zero readings in a row after a settle time, never on one
reading, and never on no answer."""
import http.client
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpuserve.llm.plugins.module_utils import engines

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "sk-drain-test-key"
DROP = "drop"  # the connection closed with no reply
REFUSE_KEY = 401


def metrics(engine, running, queued=0):
    """The engine's /metrics text with its running and queued counts (names from the engine's profile)."""
    first, second = engines.PROFILES[engine]["running"]["metrics"]
    return ("# HELP %s requests\n# TYPE %s gauge\n%s{model_name=\"m\"} %s\n%s{model_name=\"m\"} %s\n"
            "other_total 12\n" % (first, first, first, float(running), second, float(queued)))


class Engine(object):
    """An engine's /metrics on 127.0.0.1 answering `script` in order (then its last item for ever): a count,
    (running, queued), DROP, REFUSE_KEY, ("hang", seconds), or "live": the streams open for `shows_after`
    seconds or more. Its POST /v1/chat/completions streams for `stream_s` seconds."""

    def __init__(self, script=(0,), engine="llamacpp", stream_s=1.5, shows_after=0.3):
        self.script, self.engine, self.stream_s, self.shows_after = list(script), engine, stream_s, shows_after
        self.readings, self.streams, self.lock = [], [], threading.Lock()
        self.on_first_reading = None  # called at the first GET: a client's request arriving as the drain starts
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                owner.readings.append((time.monotonic(), self.headers.get("Authorization")))
                if len(owner.readings) == 1 and owner.on_first_reading:
                    owner.on_first_reading()
                with owner.lock:
                    item = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                if item == DROP:
                    self.close_connection = True
                    return
                if isinstance(item, tuple) and item[0] == "hang":
                    time.sleep(item[1])
                    item = 0
                if item == REFUSE_KEY:
                    return self.reply(401, '{"error": "invalid api key"}')
                if item == "live":  # the streams that have reached the engine's loop
                    now = time.monotonic()
                    item = sum(1 for start, end in owner.streams if start + owner.shows_after <= now and end is None)
                running, queued = item if isinstance(item, tuple) else (item, 0)
                self.reply(200, metrics(owner.engine, running, queued))

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                record = [time.monotonic(), None]
                owner.streams.append(record)
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                deadline = time.monotonic() + owner.stream_s
                while time.monotonic() < deadline:
                    self.wfile.write(b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n')
                    self.wfile.flush()
                    time.sleep(0.05)
                self.wfile.write(b'data: {"choices": [{"delta": {}, "finish_reason": "length"}]}\n\ndata: [DONE]\n\n')
                self.wfile.flush()
                record[1] = time.monotonic()
                self.close_connection = True

            def reply(self, status, text):
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def drain(url, engine="llamacpp", check=False, **args):
    """The module's result, run as Ansible runs it (a process, its arguments in a file), and its own seconds."""
    params = dict(url=url, engine=engine, api_key=KEY, timeout=10, interval=0.05, settle=0, zero_readings=3)
    params.update(args)
    argfile = os.path.join(os.environ.get("TMPDIR", "/tmp"), "engine-drain-%d-%d.json" % (os.getpid(), id(params)))
    with open(argfile, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": dict(params, _ansible_check_mode=check)}, f)
    try:
        out = subprocess.run([sys.executable, os.path.join(ROOT, "plugins", "modules", "engine_drain.py"), argfile],
                             stdout=subprocess.PIPE, text=True, check=False,
                             env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, ".collections")))
    finally:
        os.remove(argfile)
    return json.loads(out.stdout)


def free_port():
    """A port nothing listens on (an engine that is down: connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_single_zero_between_busy_readings_does_not_end_the_drain():
    with Engine([2, 0, 2, 0, 0, 1, 0, 0, 0]) as engine:
        got = drain(engine.url)
    assert got["drained"] is True and got["reason"] == "", got
    assert got["readings"] == [[2, 1], [0, 1], [2, 1], [0, 2], [1, 1], [0, 3]], got
    assert len(engine.readings) == 9  # read on past each lone zero, and no further than the third in a row
    assert got["running"] == {"first": 2, "last": 0, "max": 2} and got["zero_readings"] == 3
    assert all(auth == "Bearer " + KEY for _t, auth in engine.readings)  # /metrics needs the engine's key
    assert KEY not in json.dumps(got)


def test_no_answer_is_not_a_zero_and_breaks_the_run_of_zeros():
    # The old drain took a reading without an answer for 0 and ended on it, with requests running.
    with Engine([1, DROP, DROP, 0, 0, DROP, 0, 0, 0]) as engine:
        got = drain(engine.url)
    assert got["drained"] is True, got
    assert got["readings"] == [[1, 1], [None, 2], [0, 2], [None, 1], [0, 3]], got
    assert got["unanswered"]["count"] == 3 and got["unanswered"]["last_error"].startswith("no answer: "), got
    assert len(engine.readings) == 9


def test_the_drain_waits_the_settle_time_before_it_ends():
    with Engine([0]) as engine:
        got = drain(engine.url, settle=1.0, interval=0.1)
    assert got["drained"] is True and got["waited_s"] >= 1.0, got
    # Zeros from the first reading on, and still it read on until the settle time had passed.
    assert engine.readings[-1][0] - engine.readings[0][0] >= 0.8
    assert got["zero_readings"] >= 3 and got["readings"] == [[0, got["zero_readings"]]], got
    with Engine([0]) as engine:
        quick = drain(engine.url, settle=0, interval=0.1)
    assert quick["drained"] is True and quick["readings"] == [[0, 3]] and quick["waited_s"] < 1.0, quick


def test_a_stream_held_open_is_waited_for_though_the_engine_shows_it_late():
    """A request the router sent just before the host left reaches the engine as the drain starts, and the count
    shows it only once it is in the engine's loop (here 0.3 s later): the first readings are 0, where the old
    drain ended. The drain waits the settle time, sees the stream, and ends only after it has ended, its client
    having had the whole reply."""
    reply = {}

    def client(url):
        conn = http.client.HTTPConnection(url.split("//")[1].split(":")[0], int(url.rsplit(":", 1)[1]), timeout=30)
        conn.request("POST", "/v1/chat/completions", json.dumps({"stream": True}), {"Content-Type": "application/json"})
        reply["text"] = conn.getresponse().read().decode()

    with Engine(["live"], stream_s=1.5, shows_after=0.3) as engine:
        streaming = threading.Thread(target=client, args=(engine.url,))
        engine.on_first_reading = streaming.start
        got = drain(engine.url, settle=1.0, interval=0.05)
        ended = time.monotonic()
        streaming.join()
    assert got["drained"] is True and got["readings"][0][0] == 0, got  # one reading would have ended it here
    assert got["running"]["max"] == 1 and [1] == [c for c, _n in got["readings"] if c], got
    assert got["readings"][-1] == [0, 3], got
    assert ended >= engine.streams[0][1] and reply["text"].endswith("data: [DONE]\n\n"), (got, reply)


def test_queued_requests_count_as_held():
    # llama.cpp: 2 slots processing, 6 requests deferred for want of a slot (/slots would show 2).
    with Engine([(2, 6), (2, 4), (1, 0), 0]) as engine:
        got = drain(engine.url)
    assert got["running"] == {"first": 8, "last": 0, "max": 8}, got
    for engine_name in ("vllm", "sglang"):
        with Engine([(0, 3), 0], engine=engine_name) as engine:
            got = drain(engine.url, engine=engine_name)
        assert got["running"]["first"] == 3 and got["drained"] is True, (engine_name, got)


def test_at_the_timeout_requests_still_running_are_reported():
    with Engine([3]) as engine:
        got = drain(engine.url, timeout=1, interval=0.1)
    assert got["drained"] is False and got["reason"] == "running", got
    assert got["running"] == {"first": 3, "last": 3, "max": 3} and 1.0 <= got["waited_s"] < 3, got
    assert got["message"].startswith("3 request(s) still running after "), got
    assert "(router_drain_timeout); the engine stops now" in got["message"], got


def test_an_engine_that_never_answers_is_not_drained():
    refused = drain("http://127.0.0.1:%d" % free_port(), timeout=1, interval=0.1)
    assert refused["drained"] is False and refused["reason"] == "no_answer", refused
    assert refused["running"] == {"first": None, "last": None, "max": None}, refused
    assert refused["readings"][0][0] is None and refused["unanswered"]["count"] >= 2, refused
    assert "Connection refused" in refused["unanswered"]["last_error"], refused
    assert refused["message"].startswith("the engine gave the drain no count in "), refused
    assert "whether it runs requests is not known; the engine stops now" in refused["message"], refused
    # One that takes every connection and never replies: each reading times out within the drain's timeout.
    with Engine([("hang", 5)]) as engine:
        hung = drain(engine.url, timeout=2, interval=0.1)
    assert hung["drained"] is False and hung["reason"] == "no_answer", hung
    assert "timed out" in hung["unanswered"]["last_error"] and hung["waited_s"] < 3.5, hung


def test_an_engine_that_stops_answering_after_a_count_is_no_answer():
    with Engine([2, 0, DROP]) as engine:
        got = drain(engine.url, timeout=1, interval=0.1)
    assert got["drained"] is False and got["reason"] == "no_answer", got
    assert got["running"]["last"] == 0 and got["readings"][:2] == [[2, 1], [0, 1]], got
    stopped = "the engine stopped giving the drain a count (0 request(s) at its last; then no answer: "
    assert got["message"].startswith(stopped), got


def test_a_refused_key_fails_at_once():
    with Engine([REFUSE_KEY]) as engine:
        got = drain(engine.url, timeout=5)
    assert got.get("failed") is True and got["drained"] is False, got
    assert got["msg"].startswith("E_ENDPOINT: %s/metrics answered HTTP 401 while draining" % engine.url), got
    assert len(engine.readings) == 1 and KEY not in json.dumps(got)


def test_check_mode_reads_once():
    with Engine([2, 0]) as engine:
        busy = drain(engine.url, check=True, settle=5)
    assert busy["drained"] is False and busy["readings"] == [[2, 1]] and len(engine.readings) == 1, busy
    with Engine([0]) as engine:
        idle = drain(engine.url, check=True, settle=5)
    assert idle["drained"] is True and idle["waited_s"] < 5, idle


@pytest.mark.parametrize("engine", sorted(engines.PROFILES))
def test_each_engine_is_read_from_its_metrics_running_and_queued(engine):
    assert engines.PROFILES[engine]["running"]["path"] == "/metrics"
    assert engines.running_requests(engine, metrics(engine, 2, 5)) == 7
    assert engines.running_requests(engine, "other_metric 1\n") is None
