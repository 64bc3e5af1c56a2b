"""The service stage for real: site.yml takes a host from preflight to a LIVE, health-checked
llama.cpp endpoint (Debian's llama-server in a container on the test bed's daemon, the burn-in GGUF
mounted read-only), a rerun changes nothing, a changed setting rolls to the other slot, a broken
image refused and the old container started again failing the gate too is E_ROLLBACK. The old container
passing the gate, and stop / restart / remove through a whole life with secrets, are the SSH fleet's
(test_host_play.py)."""
import collections
import datetime
import ipaddress
import json
import os
import socket
import ssl
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import sysfs_tree
from ansible_collections.gpuserve.llm.plugins.module_utils import port_owner
from outsider import Outsider
from conftest import broken_image, docker, service_containers as containers, task_results

API_KEY = "sk-service-test-SECRET"
CPU = dict(llm_engine="llamacpp", llm_gpus=[], llm_kv="bf16", llm_vision=False, llm_dense="q4", llm_model_dense="q4",
           llm_reserve_gib=0, llm_kv_cap_gib=0, llm_weights="dummy", llm_model="gpuserve/tiny-llama-dummy",
           llm_model_max_context=8192, llm_context=2048, llm_max_tokens=256, llm_parallel=4, llm_drafter="off",
           llm_host="127.0.0.1", llm_served_model_name="tiny", llm_api_key=API_KEY)


def get(url, key=API_KEY, body=None, context=None):
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    data = json.dumps(body).encode() if body is not None else None
    with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=30,
                                context=context) as r:
        return json.loads(r.read())


def certificate(folder, name, days, names):
    """A self-signed certificate and its key as files, valid from days[0] to days[1] from now, naming `names`."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    sans = [x509.IPAddress(ipaddress.ip_address(n)) if n[0].isdigit() else x509.DNSName(n) for n in names]
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now + datetime.timedelta(days=days[0]))
            .not_valid_after(now + datetime.timedelta(days=days[1]))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False).sign(key, hashes.SHA256()))
    (folder / (name + ".crt")).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / (name + ".key")).write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                             serialization.NoEncryption()))
    return {"llm_tls": True, "llm_tls_cert_file": str(folder / (name + ".crt")),
            "llm_tls_key_file": str(folder / (name + ".key"))}


ENGINE = "http://127.0.0.1:28130"


@pytest.fixture
def service(fleet, docker_host, tmp_path):
    prefix = "gpuserve-test-svc-%d" % os.getpid()
    fleet.host("cpu1", None, llm_port=18130, llm_container_name=prefix,
               image_debian_cache=os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", str(tmp_path / "images")), **CPU)
    yield fleet, prefix
    for name in list(containers(docker_host, prefix)) + [prefix + "-front"]:
        docker(docker_host, "rm", "-f", name, check=False)


def test_one_host_from_check_to_live_rerun_roll_and_a_failed_change_rolled_back(service, docker_host, tmp_path):
    """One host's service story: --check on the fresh host, LIVE, a rerun without change, a change rolled to
    the other slot, --check of the next, then a broken image refused and the old engine failing the gate too."""
    fleet, prefix = service
    preview = fleet.run("site.yml", "--check")
    assert preview.rc == 0, preview
    assert preview.says("gpuserve/tiny-llama-dummy: dummy weights - GGUF, 2 layers") and preview.says("(would be made)")
    assert preview.says("would start %s-a (check mode: nothing changed)" % prefix), preview
    assert not preview.says("is now LIVE!")
    assert containers(docker_host, prefix) == {}
    assert not (tmp_path / "cpu1" / "data" / "models").exists()

    first = fleet.run("site.yml")
    assert first.rc == 0, first
    assert first.says("gpuserve/tiny-llama-dummy is now LIVE! on port 18130 (dummy weights)"), first
    assert first.says("KV pool: 8192 tokens, 8192 free") and first.says("dummy weights"), first
    # Warmed before the LIVE line at 1, 2 and 4 streams (llm_parallel) and a long prompt, each twice.
    assert first.says("warm-up in ") and first.says("; 4 streams ") and first.says("-token prompt "), first
    assert first.output.index("Warm the engine at the concurrencies") < first.output.index("is now LIVE! on port")
    assert API_KEY not in first.output
    # No client keys (llm_client_keys): clients hold the engine's key, and the front says so.
    assert first.says("W_SHARED_KEY [warning] cpu1 %s-front: llm_client_keys is empty" % prefix), first
    url = "http://127.0.0.1:18130"  # the front; the engine listens on 127.0.0.1:28130 (llm_port + 10000)
    assert get(url + "/v1/models")["data"][0]["id"] == "tiny"
    with pytest.raises(urllib.error.HTTPError) as denied:
        get(url + "/v1/models", key="")
    assert denied.value.code == 401
    reply = get(url + "/v1/chat/completions", body={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert reply["choices"][0]["message"]["content"]

    running = containers(docker_host, prefix)
    assert list(running) == [prefix + "-a"] and running[prefix + "-a"][1]
    inspect = json.loads(docker(docker_host, "inspect", prefix + "-a").stdout)[0]
    assert inspect["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    assert inspect["HostConfig"]["NetworkMode"] == "host"
    assert inspect["HostConfig"]["LogConfig"] == {"Type": "json-file", "Config": {"max-file": "5", "max-size": "100m"}}
    mounts = dict((m["Destination"], m) for m in inspect["Mounts"])
    assert mounts["/models/main"]["RW"] is False and mounts["/cache"]["RW"] is True
    assert mounts["/models/main"]["Source"].endswith("models/dummy/gpuserve/tiny-llama-dummy")
    assert inspect["Config"]["Labels"]["gpuserve.llm.weights"] == "dummy"

    # A rerun changes nothing and keeps the container; the preflight knows the port is ours.
    again = fleet.run("site.yml")
    assert again.rc == 0 and again.recap["cpu1"]["changed"] == 0, again
    assert again.says("is now LIVE! on port 18130") and not again.says("E_PORT_BUSY")
    assert again.says("warm-up: none (the engine already served)"), again
    assert containers(docker_host, prefix) == running

    # TLS (llm_tls): an expired certificate given is refused by preflight, before anything changes.
    expired = fleet.run("site.yml", "-e", json.dumps(certificate(tmp_path, "expired", (-30, -1), ["127.0.0.1"])))
    assert expired.rc != 0 and expired.says("E_CERT_EXPIRED [error] cpu1 llm_tls_cert_file %s: llm_tls_cert_file %s "
                                            "expired on" % ((tmp_path / "expired.crt",) * 2)), expired
    assert containers(docker_host, prefix) == running and get(url + "/v1/models")["data"], "still plain HTTP"

    # A changed setting: a new container in the other slot, the old one gone once it is healthy; with it TLS by
    # the collection's CA, made on the workstation (where ansible-playbook runs) and signing the front's certificate.
    tls = ["-e", "llm_tls=true"]
    rolled = fleet.run("site.yml", "-e", "llm_parallel=2", *tls)
    assert rolled.rc == 0 and rolled.recap["cpu1"]["changed"] >= 1, rolled
    ca = tmp_path / ".gpuserve" / "tls" / "ca.crt"
    assert rolled.says("front https://127.0.0.1:18130 (%s-front)" % prefix), rolled
    assert rolled.says("TLS by the collection's CA (clients trust %s), plain HTTP refused" % ca), rolled
    assert oct((tmp_path / ".gpuserve" / "tls" / "ca.key").stat().st_mode & 0o777) == "0o600"
    assert not list((tmp_path / "cpu1" / "data").rglob("ca.key")), "the CA's key stays on the workstation"
    now = containers(docker_host, prefix)
    assert list(now) == [prefix + "-b"] and now[prefix + "-b"][1]
    assert rolled.says("KV pool: 4096 tokens")
    # The official client verifies the front with the CA: a reply, and a stream.
    https = "https://127.0.0.1:18130"
    trusted = openai.OpenAI(base_url=https + "/v1", api_key=API_KEY, max_retries=0,
                            http_client=openai.DefaultHttpxClient(verify=ssl.create_default_context(cafile=str(ca))))
    chat = dict(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8)
    assert trusted.chat.completions.create(**chat).choices[0].message.content
    assert "".join(c.choices[0].delta.content or "" for c in trusted.chat.completions.create(stream=True, **chat))
    # Without the CA the client refuses the front; plain HTTP to the port is refused with a word.
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=https + "/v1", api_key=API_KEY, max_retries=0).models.list()
    with pytest.raises(urllib.error.HTTPError) as plain:
        get(url + "/v1/models")
    assert plain.value.code == 400 and "use https://" in plain.value.read().decode()
    context = ssl.create_default_context(cafile=str(ca))
    assert len(get(ENGINE + "/slots")) == 2  # the engine's own route, on loopback
    with pytest.raises(urllib.error.HTTPError) as refused:
        get(https + "/slots", context=context)  # not through the front
    assert refused.value.code == 404

    # --check says what would change and changes nothing; with a given certificate that ends in 10 days and does
    # not name the address the front is reached at, preflight warns of both.
    # The pair is given relative to where ansible-playbook runs (tmp_path), as a user may.
    soon = dict(certificate(tmp_path, "soon", (-1, 10), ["api.example.com"]), llm_tls_cert_file="soon.crt",
                llm_tls_key_file="soon.key")
    preview = fleet.run("site.yml", "--check", "-e", "llm_parallel=3", "-e", json.dumps(soon))
    assert preview.rc == 0 and preview.says("would start %s-a and stop %s-b" % (prefix, prefix)), preview
    assert preview.says("W_CERT_EXPIRING [warning] cpu1 llm_tls_cert_file soon.crt: llm_tls_cert_file soon.crt "
                        "expires on") and preview.says("within 30 days"), preview
    assert preview.says("does not name 127.0.0.1 (it names api.example.com)"), preview
    assert containers(docker_host, prefix) == now
    assert get(https + "/v1/models", context=context)["data"], "the front kept the CA's certificate"

    # Another host - a container on a network of its own, as a client machine is - reaches the front at this
    # host's address on that network and never the engine: with llm_host that address, the engine stays on
    # loopback (issue 36: tested, not assumed). What listens, read as `ss -ltn` does, says the same.
    with Outsider(docker_host, os.environ["GPUSERVE_TESTHOST_IMAGE"]) as other:
        gateway = other.address
        # The CA's folder given relative to where ansible-playbook runs (tmp_path): the same CA, read by the
        # lookups and the modules alike.
        ca_before = ca.read_bytes()
        moved = fleet.run("site.yml", "-e", "llm_parallel=2", *tls, "-e", "llm_host=" + gateway,
                          "-e", "llm_tls_ca_dir=.gpuserve/tls")
        assert moved.rc == 0 and moved.says("front https://%s:18130" % gateway), moved
        assert moved.says("clients trust %s)" % ca) and ca.read_bytes() == ca_before, moved
        # New names: the certificate is requested and signed anew (a certificate the CA's, this key's and fresh for
        # its names is not: the SSH fleet's rerun, test_host_play.py).
        signed = task_results(moved.output, "gpuserve.llm.front : Sign the front's certificate")
        assert "changed: [cpu1" in signed, signed
        assert containers(docker_host, prefix) == now, "a front setting moves the front, not the engine"
        assert dict((port, sorted(s["address"] for s in port_owner.listeners("/proc", port)))
                    for port in (18130, 28130)) == {18130: [gateway], 28130: ["127.0.0.1"]}
        # The front's certificate names the address it is bound to: the CA's clients verify it there.
        assert other.ask([("https", gateway, 18130, "GET", "/v1/models", None),
                          ("http", gateway, 28130, "GET", "/v1/models", None)], cafile=str(ca)) == [401, "refused"]

    # A new container that fails health is removed and the old one started again, health-gated: the SSH
    # fleet's test (test_host_play.py) takes that path behind the router. Here the old one fails the gate too.
    broken = broken_image(docker_host)
    # A restored engine that fails the gate is its own code, with its log's end. Contrived here: a smoke
    # prompt longer than a slot's context, which the old engine refuses (HTTP 400) after the new one failed.
    both = fleet.run("site.yml", "-e", "llm_parallel=2", "-e", "llm_image=" + broken, *tls,
                     "-e", json.dumps({"service_smoke_prompt": "tell me more " * 1500}))
    assert both.rc != 0 and both.says("E_HEALTH [error] cpu1 %s-a" % prefix), both
    assert both.says("E_ROLLBACK [error] cpu1 %s-b: the previous container %s-b was started again but did not pass "
                     "the health gate" % (prefix, prefix)), both
    assert both.says("The last lines of its log:") and not both.says("passed the health gate"), both
    # The collection's CA, there since the run above, is read by preflight (its end checked) without a module run to
    # find it.
    read = task_results(both.output, "gpuserve.llm.preflight : Read the certificate (its dates and names)")
    assert "ok: [cpu1" in read, read
    assert not both.says("the fronts' CA"), both  # read, and no finding of it (a failed read is one)
    assert API_KEY not in both.output


class Squatter(BaseHTTPRequestHandler):
    """Not the engine: a process that took the engine's port, answering /health 200 and every chat completion
    with a null reply (what the issue's first bring-up met)."""

    def log_message(self, *_args):
        pass

    def answer(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (the http.server name)
        self.answer({})

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.answer({"choices": [{"message": {"role": "assistant", "content": None}, "finish_reason": "stop"}]})


def test_a_process_answering_on_the_engines_port_is_never_said_live(service, docker_host, tmp_path):
    """Issue 38 item 7: another process takes the engine's port after preflight found it free (the preflight reads
    a procfs where nothing listens, standing for the moment it looked) and answers /health 200 there, while the
    new container cannot bind and restarts. The gate names the port and the process and fails; no LIVE line."""
    fleet, prefix = service
    port = int(ENGINE.rsplit(":", 1)[1])
    squatter = ThreadingHTTPServer(("127.0.0.1", port), Squatter)
    threading.Thread(target=squatter.serve_forever, daemon=True).start()
    try:
        looked = sysfs_tree.make_proc(str(tmp_path / "proc-at-preflight"))
        run = fleet.run("site.yml", "-e", "preflight_proc_root=" + looked, "-e", "autotune_llamacpp=false")
    finally:
        squatter.shutdown()
        squatter.server_close()
    assert run.rc != 0, run
    assert not run.says("is now LIVE!"), run
    assert not run.says("E_PORT_BUSY [error] cpu1 port %d" % port), "the preflight's finding, not the gate's"
    # Whether the container was still loading (its port held by the squatter) or already restarting when the gate
    # looked, the failure is the gate's, on the new slot, naming the port and this process.
    assert (run.says("E_PORT_BUSY [error] cpu1 %s-a: port %d, the engine's" % (prefix, port))
            or run.says("E_HEALTH [error] cpu1 %s-a: the engine container %s-a " % (prefix, prefix))), run
    assert run.says("is held by pid %d (" % os.getpid()), run
    assert containers(docker_host, prefix) == {}, "the failed container is removed"


class DroppingUpstream(threading.Thread):
    """An upstream that answers a connection's first request (keep-alive) and closes the connection on its second
    after reading it, with no reply: what the front meets when an engine ends a kept connection as the front sends
    a request on it. Records (connection, request line) of every request it read."""

    def __init__(self):
        threading.Thread.__init__(self, daemon=True)
        self.server = socket.socket()
        self.server.bind(("127.0.0.1", 0))
        self.server.listen(8)
        self.port = self.server.getsockname()[1]
        self.requests = []

    def run(self):
        n = 0
        while True:
            try:
                conn = self.server.accept()[0]
            except OSError:
                return
            n += 1
            threading.Thread(target=self.serve, args=(conn, n), daemon=True).start()

    def serve(self, conn, n):
        reader = conn.makefile("rb")
        for count in (1, 2):
            line = reader.readline()
            if not line:
                break
            length = 0
            for header in iter(reader.readline, b"\r\n"):
                name, value = (header.decode().split(":", 1) + [""])[:2]
                if name.strip().lower() == "content-length":
                    length = int(value)
            reader.read(length)
            self.requests.append((n, line.decode().split(" ")[1]))
            if count == 2:
                break
            body = json.dumps({"id": "x", "object": "chat.completion", "model": "tiny", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}]}).encode()
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                         % (len(body), body))
        reader.close()
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()


class GetOnlyRoutes(BaseHTTPRequestHandler):
    """An engine's GET routes as FastAPI declares them (vLLM, SGLang): HEAD is 405. Records (method, path)."""
    seen = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.seen.append(("GET", self.path) + ((("body", self.headers["Content-Length"]),)
                                               if self.headers["Content-Length"] else ()))
        body = b'{"object": "list", "data": [{"id": "tiny", "object": "model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self):  # noqa: N802
        self.seen.append(("HEAD", self.path))
        self.send_response(405)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_head_on_a_get_route_is_answered_through_the_front_as_the_engine_answers_get(docker_host, tmp_path):
    """The front allows HEAD where it allows GET (/v1/models, /health): it asks the engine with GET and gives the
    client the headers alone, since vLLM's and SGLang's routes answer HEAD with 405."""
    from front_alone import CLIENTS, Front
    from ansible_collections.gpuserve.llm.plugins.module_utils import engines
    server = ThreadingHTTPServer(("127.0.0.1", 0), GetOnlyRoutes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    front = Front(docker_host, "gpuserve-test-head-front", 18116, "127.0.0.1:%d" % server.server_address[1],
                  str(tmp_path / "front"), upstream_key=API_KEY, front_routes=engines.PROFILES["vllm"]["front_routes"],
                  front_media=engines.PROFILES["vllm"]["media_per_request"])
    try:
        del GetOnlyRoutes.seen[:]
        answers = []
        for path in ("/v1/models", "/health"):
            request = urllib.request.Request(front.url + path, method="HEAD",
                                             headers={"Authorization": "Bearer " + CLIENTS["alice"]})
            with urllib.request.urlopen(request, timeout=30) as r:
                answers.append((path, r.status, r.headers.get("Content-Type"), r.read()))
        assert answers == [("/v1/models", 200, "application/json", b""), ("/health", 200, "application/json", b"")], \
            (answers, front.logs()[-2000:])
        assert get(front.url + "/v1/models", CLIENTS["alice"])["data"][0]["id"] == "tiny"
        assert GetOnlyRoutes.seen == [("GET", "/v1/models"), ("GET", "/health"), ("GET", "/v1/models")], \
            GetOnlyRoutes.seen
        # /health, which asks no key, takes no body: a small one is not sent on, a larger one is 413 unread. Its
        # rate per address (10/s, a burst of 20) spares the host's own loopback (the plays, keepalived's check).
        del GetOnlyRoutes.seen[:]
        statuses = []
        for body in (b"x" * 100, b"x" * 4096):
            try:
                with urllib.request.urlopen(urllib.request.Request(front.url + "/health", data=body, method="GET"),
                                            timeout=30) as r:
                    statuses.append(r.status)
            except urllib.error.HTTPError as e:
                statuses.append(e.code)
        assert statuses == [200, 413] and GetOnlyRoutes.seen == [("GET", "/health")], (statuses, GetOnlyRoutes.seen)
        polled = collections.Counter()
        for _poll in range(40):
            with urllib.request.urlopen(front.url + "/health", timeout=30) as r:
                polled[r.status] += 1
        assert polled == {200: 40}, polled
        # with the engine gone, the front's own 503 (not nginx's 502), there as on the routes
        server.shutdown()
        server.server_close()
        with pytest.raises(urllib.error.HTTPError) as down:
            urllib.request.urlopen(front.url + "/health", timeout=30)
        assert down.value.code == 503 and "not answering" in down.value.read().decode()
    finally:
        front.stop()
        server.shutdown()


def test_a_post_on_a_kept_connection_the_engine_drops_is_sent_again_not_a_503(docker_host, tmp_path):
    """The front (roles/front's configuration, nginx from the Debian root, one worker so that the kept connection
    is the one reused) before an upstream that drops a kept connection under a POST: the client gets the reply,
    sent on a new connection, not the front's 503."""
    from front_alone import CLIENTS, Front
    from ansible_collections.gpuserve.llm.plugins.module_utils import engines
    upstream = DroppingUpstream()
    upstream.start()
    front = Front(docker_host, "gpuserve-test-dropping-front", 18114, "127.0.0.1:%d" % upstream.port,
                  str(tmp_path / "front"), upstream_key=API_KEY, front_workers=1,
                  front_routes=engines.PROFILES["llamacpp"]["front_routes"],
                  front_media=engines.PROFILES["llamacpp"]["media_per_request"])
    try:
        chat = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

        def post():
            try:
                return 200, get(front.url + "/v1/chat/completions", CLIENTS["alice"], chat)
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()
        answers = [post(), post()]
        assert [answer[0] for answer in answers] == [200, 200], (answers, front.logs()[-2000:])
        assert answers[1][1]["choices"][0]["message"]["content"] == "hi"
        # The front's /health at its start opened connection 1; each POST went on the kept connection, was read
        # and dropped there, and was sent again on a new one (the second request on each connection is dropped).
        chat_path = "/v1/chat/completions"
        assert upstream.requests == [(1, "/health"), (1, chat_path), (2, chat_path), (2, chat_path), (3, chat_path)], \
            upstream.requests
    finally:
        front.stop()
        upstream.server.close()
