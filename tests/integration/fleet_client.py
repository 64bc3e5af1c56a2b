"""Clients of a served fleet for the router tests (TEST PLUMBING, not the collection's).

Standard library only, so the test run needs no HTTP package. Written against vllm-router 0.1.17 in
front of llama-server (llama.cpp 0.7.0) engines; the facts they rely on are in
tests/fixtures/vllm-router-0.1.17/README.md (sections 5 and 6).

- StreamLoad: streamed chat requests from a few threads until stopped, each one counted completed or
  failed. A killed engine behind the router gives HTTP 200 and a stream that just ends (no retry),
  so only a stream with a finish_reason and `data: [DONE]` counts as completed.

      with StreamLoad("http://127.0.0.1:18910", key, "tiny", concurrency=3) as load:
          ...                                  # roll the fleet
      assert load.counts()["failed"] == 0, load.counts()["reasons"]

  A 200-token stream takes ~0.1 s here, so a kill -9 meant to cut one must wait for the engine's
  `llamacpp:requests_processing` > 0 first. The router's circuit breaker keeps a killed and
  restarted engine out of the rotation for ~50 s (--cb-timeout-duration-secs 60).

- HeldOnLeave: streams opened at a host's own front the moment it leaves the router in a roll, so that its
  drain has requests to wait for; each one counted completed or not.

- multiturn: conversations sent round by round, one request at a time, each turn resending the whole
  conversation; which engine served each request (from the engines' /metrics counters: the reply
  does not say) and the cached prompt tokens of turns 2+.

      result = multiturn(router, [engine1, engine2, engine3], key, "tiny")
      one_host_per_conversation(result), share(result)
"""
# The callers' knobs are arguments with defaults, as the tests name them.
# pylint: disable=too-many-arguments,too-many-positional-arguments
import http.client
import json
import ssl
import threading
import time
import urllib.parse
import uuid

CHAT_PATH = "/v1/chat/completions"
MAX_REASONS = 20
FAILURE_PAUSE = 0.1  # after a failed request, so a dead endpoint is not hammered in a tight loop
# llama-server 0.7.0 has no requests counter (requests_processing is a gauge); these counters grow
# with every request an engine serves and with nothing else (health checks, /metrics, /slots).
SERVED_COUNTERS = (
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:tokens_predicted_total",
)
# Words of the conversations' first messages; each conversation starts at another place in it.
VOCABULARY = (
    "amber basalt cedar delta ember fjord granite harbor iris juniper kelp lagoon meadow nickel "
    "orchid pebble quartz raven sierra tundra umber valley willow xenon yarrow zephyr anchor "
    "beacon canyon dune estuary falcon glacier heron inlet jasper kestrel lantern marble nectar"
).split()


# The CA an https:// front is verified with (trust()); None: the system's.
_TRUSTED = {"context": None}


def trust(cafile):
    """Verify https:// fronts with this CA (the collection's, llm_tls) from now on; returns the SSL context."""
    _TRUSTED["context"] = ssl.create_default_context(cafile=cafile)
    return _TRUSTED["context"]


def untrust():
    """Back to the system's CAs (the end of a test that called trust())."""
    _TRUSTED["context"] = None


def tls_context():
    """The SSL context trust() made (None before): for the test's own urllib and http.client calls."""
    return _TRUSTED["context"]


def _connection(base_url, timeout):
    """An HTTP(S) connection to base_url's host and the path prefix to put before the API paths."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout, context=_TRUSTED["context"])
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    return conn, parts.path.rstrip("/")


def _headers(api_key):
    return {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}


def _short(text, limit=160):
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# One flat function: each return is one way a stream fails, read top to bottom.
# pylint: disable-next=too-many-locals,too-many-return-statements,too-many-branches
def stream_chat(base_url, api_key, model, max_tokens=200, timeout=120, content="Say something."):
    """One streamed chat request; None when it completed, else a short reason why it failed.

    Completed: HTTP 200, a chunk with a non-null finish_reason, and the stream ended with
    `data: [DONE]`. The socket timeout bounds each read; the deadline bounds the whole request.
    """
    body = json.dumps({
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": True,  # the burn-in model stops after ~14 tokens otherwise
        "stream": True,
    })
    deadline = time.monotonic() + timeout
    conn, prefix = _connection(base_url, timeout)
    chunks = 0
    finish = None
    done = False
    status = None
    try:
        conn.request("POST", prefix + CHAT_PATH, body, _headers(api_key))
        resp = conn.getresponse()
        status = resp.status
        if status != 200:
            return f"HTTP {status}: {_short(resp.read().decode(errors='replace'), 120)}"
        for raw in resp:
            if time.monotonic() > deadline:
                return f"timeout: stream still running after {timeout}s ({chunks} chunks)"
            line = raw.decode(errors="replace").strip()
            if not line:
                continue
            if not line.startswith("data:"):
                # llama-server sends `error: {...}` lines for errors found mid-stream
                return f"stream error line: {_short(line, 120)}"
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                continue
            if done:
                return f"data after [DONE]: {_short(data, 80)}"
            try:
                event = json.loads(data)
            except ValueError:
                return f"bad SSE data: {_short(data, 80)}"
            if "error" in event:
                return f"stream error: {_short(json.dumps(event['error']), 120)}"
            chunks += 1
            for choice in event.get("choices") or []:
                finish = choice.get("finish_reason") or finish
    except TimeoutError as exc:
        return f"timeout ({type(exc).__name__}) after {chunks} chunks, HTTP {status}"
    except (OSError, http.client.HTTPException) as exc:
        # After a 200 the router has started the stream: an exception now means it was cut.
        if status == 200:
            return f"stream cut: {type(exc).__name__}: {_short(exc, 80)} after {chunks} chunks"
        return f"connection error: {type(exc).__name__}: {_short(exc, 80)}"
    finally:
        conn.close()
    if not done:
        return f"stream cut: ended without [DONE] after {chunks} chunks, finish_reason {finish}"
    if finish is None:
        return f"no finish_reason in {chunks} chunks before [DONE]"
    return None


class StreamLoad:  # pylint: disable=too-many-instance-attributes
    """Streamed chat requests from `concurrency` threads, from __enter__ until __exit__.

    On exit no new request starts and the ones in flight are waited for (each is bounded by
    `timeout`); one still running after that is counted failed and its late result dropped, so
    sent == completed + failed after exit.
    """

    def __init__(self, base_url, api_key, model, concurrency=3, max_tokens=200, timeout=120):
        self.base_url = base_url
        self.api_key = api_key
        self.model = model
        self.concurrency = concurrency
        self.max_tokens = max_tokens
        self.timeout = timeout
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = []
        self._in_flight = set()  # thread names with a request under way
        self._closed = False     # set once exit gave up waiting: later results are dropped
        self._sent = 0
        self._completed = 0
        self._failed = 0
        self._reasons = []
        self._log = []  # (started, ended, reason or None) of each request, time.monotonic()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def start(self):
        """Start the sending threads."""
        for number in range(self.concurrency):
            # daemon: a thread stuck past stop()'s wait must not keep pytest from exiting
            thread = threading.Thread(target=self._run, name=f"stream-load-{number}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self, wait=None):
        """Send no new requests; wait up to `wait` s (default timeout + 10) for those in flight."""
        self._stop.set()
        wait = self.timeout + 10 if wait is None else wait
        end = time.monotonic() + wait
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))
        with self._lock:
            self._closed = True
            for name in sorted(self._in_flight):
                self._record(f"{name}: still in flight when the load stopped (waited {wait}s)")
            self._in_flight.clear()
        return self.counts()

    def counts(self):
        """{sent, completed, failed, reasons}: reasons are the first MAX_REASONS failures'."""
        with self._lock:
            return {
                "sent": self._sent,
                "completed": self._completed,
                "failed": self._failed,
                "reasons": list(self._reasons),
            }

    def outcomes(self):
        """[(started, ended, reason or None)] of each request that ended, in time.monotonic()."""
        with self._lock:
            return list(self._log)

    def _record(self, reason):
        # the caller holds the lock
        if reason is None:
            self._completed += 1
            return
        self._failed += 1
        if len(self._reasons) < MAX_REASONS:
            self._reasons.append(reason)

    def _run(self):
        name = threading.current_thread().name
        number = 0
        while not self._stop.is_set():
            with self._lock:
                if self._closed:
                    return
                self._sent += 1
                self._in_flight.add(name)
            number += 1
            started = time.monotonic()
            try:
                reason = stream_chat(self.base_url, self.api_key, self.model, self.max_tokens,
                                     self.timeout, content=f"{name} request {number}: say something.")
            except Exception as exc:  # pylint: disable=broad-exception-caught
                # any bug or surprise in one request is a failure to count, not a dead thread
                reason = f"client error: {type(exc).__name__}: {_short(exc, 80)}"
            with self._lock:
                if self._closed:
                    return  # already counted failed by stop()
                self._in_flight.discard(name)
                self._record(reason)
                self._log.append((started, time.monotonic(), reason))
            if reason is not None:
                self._stop.wait(FAILURE_PAUSE)


class HeldOnLeave(threading.Thread):  # pylint: disable=too-many-instance-attributes
    """Streams held open on the host being rolled (issue 38 item 6): watches the router's workers and, when
    the first of those there at the start leaves, opens `count` streamed requests at that host's own front
    (its engine, being drained, still serves them). Each one's result is kept: None when it completed.

        held = HeldOnLeave(router_workers, engines, fronts, keys)
        held.start(); ...roll...; held.finish()
        assert held.host and held.results == [None] * held.count

    `workers`: a callable giving the router's worker URLs (None when it does not answer); `engines`:
    {host: its worker URL}; `fronts`: {host: its front's URL}; `keys`: {host: the key its front takes}.
    `count` at most the front's connections per key (front_connections_per_key: 2 x llm_parallel).
    """

    def __init__(self, workers, engines, fronts, keys, count=4, max_tokens=1500, poll=0.2):
        super().__init__(name="held-on-leave", daemon=True)
        self.workers, self.engines, self.fronts, self.keys = workers, engines, fronts, keys
        self.count, self.max_tokens, self.poll = count, max_tokens, poll
        self.host, self.left_at, self.results = None, None, []
        self._done = threading.Event()
        self._lock = threading.Lock()

    def run(self):
        present = set(self.workers() or [])
        while not self._done.is_set():
            now = self.workers()
            gone = [h for h, url in self.engines.items() if url in present and now is not None and url not in now]
            if gone:
                self.host, self.left_at = gone[0], time.monotonic()
                break
            self._done.wait(self.poll)
        if self.host is None:
            return
        streams = [threading.Thread(target=self._one, args=(n,), daemon=True) for n in range(self.count)]
        for thread in streams:
            thread.start()
        for thread in streams:
            thread.join()

    def _one(self, number):
        try:
            reason = stream_chat(self.fronts[self.host], self.keys[self.host], "tiny", self.max_tokens, timeout=300,
                                 content=f"held stream {number}: say something.")
        except Exception as exc:  # pylint: disable=broad-exception-caught
            reason = f"client error: {type(exc).__name__}: {_short(exc, 80)}"
        with self._lock:
            self.results.append(reason)

    def finish(self, wait=330):
        """Stop watching (a host that has not left by now is not waited for) and wait for the held streams."""
        self._done.set()
        self.join(wait)
        return self.host, list(self.results)


def _request_json(base_url, api_key, method, path, payload=None, timeout=120):
    conn, prefix = _connection(base_url, timeout)
    try:
        conn.request(method, prefix + path, None if payload is None else json.dumps(payload),
                     _headers(api_key))
        resp = conn.getresponse()
        text = resp.read().decode(errors="replace")
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{method} {base_url}{path}: HTTP {resp.status}: {_short(text)}")
    return text


def engine_counters(engine_base, api_key, timeout=30):
    """The SERVED_COUNTERS of one llama-server from GET /metrics (needs --metrics and the key)."""
    text = _request_json(engine_base, api_key, "GET", "/metrics", timeout=timeout)
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.rsplit(None, 1)
        values[name] = float(value)
    missing = [name for name in SERVED_COUNTERS if name not in values]
    if missing:
        raise RuntimeError(f"{engine_base}/metrics lacks {missing} (is --metrics on?)")
    return tuple(values[name] for name in SERVED_COUNTERS)


def _first_message(conv, words, tag):
    # distinct from the first words on, so no two conversations share a prefix past the template's
    start = (conv * 11) % len(VOCABULARY)
    text = " ".join(VOCABULARY[(start + i * (conv + 1)) % len(VOCABULARY)] for i in range(words))
    return f"[{tag}] Conversation {conv}. Tell me a story using these words: {text}"


# pylint: disable-next=too-many-locals
def multiturn(router_base, engine_bases, api_key, model, conversations=4, turns=3, words=60, *,
              tag=None, max_tokens=16, timeout=120, engine_key=None):
    """Conversations through the router, round by round, one request at a time.

    Turn 1 of every conversation, then turn 2 of each, ...; each request resends the whole
    conversation (user messages and assistant replies) plus a new user message, not streamed.
    The serving engine is the one whose SERVED_COUNTERS grew across the request (nothing else may
    use the engines meanwhile); exactly one must, else RuntimeError. `tag` (default: new per call)
    starts every first message, so a run does not hit the prompt cache of an earlier run. `engine_key`:
    the key the engines' /metrics take when it is not the client's (a front with client keys).

    Returns {"served": {conv: [engine index per turn]}, "cached": cached prompt tokens of turns 2+
    (usage.prompt_tokens_details.cached_tokens), "prompt": usage.prompt_tokens of turns 2+,
    "per_engine": {engine index: requests}}.
    """
    tag = tag or uuid.uuid4().hex[:8]
    history = {conv: [] for conv in range(conversations)}
    served = {conv: [] for conv in range(conversations)}
    per_engine = {index: 0 for index in range(len(engine_bases))}
    cached = prompt = 0
    for turn in range(turns):
        for conv in range(conversations):
            content = (_first_message(conv, words, tag) if turn == 0
                       else f"Turn {turn + 1} of conversation {conv}: and then what happened?")
            history[conv].append({"role": "user", "content": content})
            before = [engine_counters(base, engine_key or api_key) for base in engine_bases]
            reply = json.loads(_request_json(
                router_base, api_key, "POST", CHAT_PATH,
                {"model": model, "messages": history[conv], "max_tokens": max_tokens},
                timeout=timeout))
            after = [engine_counters(base, engine_key or api_key) for base in engine_bases]
            grown = [index for index, (old, new) in enumerate(zip(before, after)) if new != old]
            if len(grown) != 1:
                raise RuntimeError(f"conversation {conv} turn {turn + 1}: engines {grown} grew, "
                                   f"not exactly one (is something else using them?)")
            served[conv].append(grown[0])
            per_engine[grown[0]] += 1
            history[conv].append(
                {"role": "assistant", "content": reply["choices"][0]["message"]["content"] or ""})
            if turn > 0:
                usage = reply["usage"]
                cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
                prompt += usage["prompt_tokens"]
    return {"served": served, "cached": cached, "prompt": prompt, "per_engine": per_engine}


def one_host_per_conversation(result):
    """True when each conversation's turns 2+ were all served by one engine."""
    return all(len(set(turns[1:])) <= 1 for turns in result["served"].values())


def share(result):
    """Cached prompt tokens of turns 2+ over their prompt tokens (0.0 with none)."""
    return result["cached"] / result["prompt"] if result["prompt"] else 0.0
