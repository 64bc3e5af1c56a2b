"""Generated requests that try to get past a front (TEST PLUMBING): every trick seen or known for escaping a
path allow-list, on every path an engine or the router serves beside the OpenAI routes, with every method.

    for method, path in variants(worker): ...   # >= 500 (method, raw path) pairs, sent as-is (no client normalising)
    send(base, method, path, key)               # -> HTTP status, or None when the front closed the connection

None of them is an allowed route under a method it takes, so nothing should reach an engine or the router.
The test judges that by what arrived, not by the status the client saw: the router's own counters (its
requests by route) and worker list (a /remove_worker of a real worker that got through would shrink it),
the engines' own counters, and each front's log of what it sent upstream (`forwarded(log_text)`).
llama-server 0.7.0 logs no line per request at any verbosity (-v included), so its log cannot say.
"""
import http.client
import re
import urllib.parse

# Beside the OpenAI routes: what llama-server, vLLM and vllm-router answer on their own.
ENGINE_ONLY = ["/slots", "/props", "/metrics", "/health", "/tokenize", "/detokenize", "/apply-template", "/infill",
               "/completion", "/completions", "/embedding", "/embeddings", "/rerank", "/lora-adapters", "/invocations",
               "/load", "/version", "/ping", "/is_scaling_elastic_ep", "/scale_elastic_ep", "/v1/embeddings",
               "/v1/rerank", "/v1/responses", "/v1/audio/transcriptions", "/slots/0?action=save"]
ROUTER_ADMIN = ["/add_worker?url={worker}", "/remove_worker?url={worker}", "/list_workers", "/workers", "/flush_cache",
                "/get_loads", "/readiness", "/liveness", "/get_server_info", "/get_model_info", "/health_generate",
                "/generate", "/workers/{worker}"]
ALLOWED = ["/v1/chat/completions", "/v1/completions", "/v1/models"]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"]


def _escapes(target):
    """Ways to reach `target` (a path) from inside the allowed /v1/ prefix or around an exact route."""
    bare = target.lstrip("/")
    quoted = urllib.parse.quote(bare, safe="")
    return [
        target,
        "/v1/..\\" + bare,                          # nginx passes it, the router resolved it to the worker's /X
        "/v1/..%5c" + bare, "/v1/..%5C" + bare,
        "/v1/%2e%2e/" + bare, "/v1/%2E%2E/" + bare,
        "/v1/%252e%252e/" + bare,                   # double encoding
        "/v1/chat/completions/../../" + bare,
        "/v1/./../" + bare, "//" + bare, "/./" + bare,
        "/v1/models/..%2f" + bare, "/v1%2f..%2f" + bare,
        "/%2f" + quoted,
        "/v1/chat/completions/%2e%2e/%2e%2e/" + bare,
        "/" + bare.upper(),
        "/v1/..;/" + bare,
    ]


def _around(route):
    """Near misses of an allowed route that a loose match would take. (`/v1//chat/completions` and
    `/v1/./chat/completions` are not among them: nginx normalises both to the route itself, and the front
    forwards them as exactly that path - EQUIVALENT.)"""
    return [route + "/", route + "/../../slots", route + "%00", route + ";x", route + "/x", route.upper(),
            route.replace("/v1/", "/V1/"), route + "%2f..%2f..%2fslots", route + "/%2e%2e/%2e%2e/slots"]


# Other spellings of an allowed route: normalised to it, forwarded as exactly its path.
EQUIVALENT = {"/v1//chat/completions": "/v1/chat/completions", "/v1/./chat/completions": "/v1/chat/completions",
              "/v1/models/../chat/completions": "/v1/chat/completions"}


def variants(worker="http://127.0.0.1:1"):
    """(method, raw path) pairs: the escapes of every engine-only and router path under every method, the near
    misses of each allowed route, and the allowed routes under the methods they do not take. `worker`: a real
    worker's URL for the router's admin paths."""
    found = []
    quoted = urllib.parse.quote(worker, safe="")
    for target in ENGINE_ONLY + [p.format(worker=quoted) for p in ROUTER_ADMIN]:
        for i, path in enumerate(_escapes(target)):
            for method in (METHODS if i < 2 else METHODS[i % 2: i % 2 + 2]):
                found.append((method, path))
    for route in ALLOWED:
        for path in _around(route):
            found.extend((m, path) for m in ("GET", "POST"))
        found.extend((m, route) for m in ("PUT", "DELETE", "PATCH", "OPTIONS"))
    return sorted(set(found))


def send(base, method, path, key, timeout=30, context=None):
    """The request as given, path not normalised by the client; its status (None: the connection was closed).
    An https:// base is verified with `context` (the front's CA)."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        body = b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}'
        headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
        conn.putrequest(method, path, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value)
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        response.read()
        return response.status
    except (http.client.HTTPException, OSError):
        return None
    finally:
        conn.close()


FRONT_LINE = re.compile(r'"([A-Z]+) ([^"]*)" (\d{3}) \d+ \d+ \S+ upstream=(\S+) path=(\S*)$')


def forwarded(log_text):
    """(method, path the client asked, status, path sent upstream) of each request a front's log (templates/
    front.conf.j2's log_format) says it sent upstream; one it answered itself has upstream=-."""
    return [(m, asked, int(status), sent) for m, asked, status, upstream, sent in
            (FRONT_LINE.search(line).groups() for line in log_text.splitlines() if FRONT_LINE.search(line))
            if upstream != "-"]
