"""keepalived's check of a router host (gpuserve.llm, roles/router): exit 0 = this host may hold router_vip.

Run as root every router_vrrp_check_interval seconds (vrrp_script), with the check's configuration (JSON,
written by the router role) as its argument. In order:
1. the plays stopped the router (stop.yml, remove.yml: the `stopped` mark): give the address up;
2. the router or its front container is not running (a crash, an OOM kill, `docker kill`, which Docker's
   restart policy does not undo): give the address up at once, and start it again in a child process (not the
   router while the plays replace it);
3. the router container started since the workers were last recorded (started again here, or by its
   daemon, or its host came back): put back the workers the other router hosts' routers serve now (asked of
   their fronts with the internal key: a host added or removed while this one was down is known there),
   or the workers recorded here when no peer answers; those that answer their health check (the others are
   noted, as below), and take out any other; give the address up this time. A container the plays start is
   recorded anew: the router play marks the one it replaces (`replacing`), and nothing is recorded from it;
4. put back the workers noted (below) that answer again;
5. record the router's workers and the noted ones (the record a router started again is given back), and
   publish them (`published`, in the front's folder) for the other router hosts' checks, with an HMAC under the
   internal key that a peer checks before it takes them;
6. the front's /health (the router ready with at least one worker): 200 or give the address up.
With `master` after the configuration (keepalived's notify_master, when this host takes the address): take out
of the router every worker whose host takes no TCP connection within CONNECT_TIMEOUT, and note them in
evicted.json. The router would go on sending them requests until its own health checks mark them (each such
request waits on a dead host before it is retried elsewhere); a router host that stopped takes its engine with
it. The plays (router_workers' evicted_file) drop a worker they add or remove from the note, so the check does
not put back a worker the plays took out (unless the run could not reach this host or write the note).
A check that cannot tell (the Docker daemon, the router or the front did not answer in time, as on a starved host) is
a doubt, not a failure: the host keeps its last verdict for up to DOUBTS checks in a row, then gives the address
up. An address given up moves, and a client waiting on a connection to the old holder may hear nothing until its
own timeout (its replies cannot leave a host that no longer holds the address): a passing stall must not move it.
With `backup` or `fault` (keepalived's notify_backup and notify_fault), and `master`: the state is logged.
Standard library only; what it did goes to check.log in the state folder (each verdict that changed, each doubt,
each state keepalived entered), the system log (tag gpuserve-router-check) and standard error.
"""
import contextlib
import fcntl
import json
import os
import socket
import sys
import syslog
import time
import urllib.parse

# keepalived starts this every second on each router host: what only some checks need (threads, TLS, the peers'
# token) is imported where it is used, and HTTP is spoken here in a few lines (exchange): http.client alone imports
# the email package and ssl, 28 of the 78 ms of CPU a check took.

# A dead host takes no connection: the MASTER's notice asks only that, not /health (SGLang's takes >= 1 s).
CONNECT_TIMEOUT = 0.5
HEALTH_TIMEOUT = 5  # a noted worker that takes connections again: its /health, before it is put back
PEERS = b"gpuserve.llm router peers"  # the HMAC's message, as in the front's front_auth.js
LISTED = b"gpuserve.llm router workers\n"  # the published list's HMAC: this, then the URLs as JSON
# A mark of the plays' replacing the router older than this is a run that ended before it started the new one.
MARK_SECS = 900
DOUBTS = 3  # checks in a row that cannot tell before the address is given up (about 3 s at one a second)
LOG_BYTES = 1 << 20  # check.log is moved to check.log.1 beyond this
LOG = {"path": None}


class Doubt(Exception):
    """The check could not tell: something it asks did not answer in time (not: answered no)."""


def say(text):
    """keepalived sends a script's output nowhere: check.log and the system log too."""
    sys.stderr.write("gpuserve router check: %s\n" % text)
    syslog.openlog("gpuserve-router-check")
    syslog.syslog(text)
    if LOG["path"]:
        try:
            if os.path.getsize(LOG["path"]) > LOG_BYTES:
                os.replace(LOG["path"], LOG["path"] + ".1")
        except OSError:
            pass
        try:
            with open(LOG["path"], "a") as f:
                f.write("%s %s\n" % (stamp(), text))
        except OSError:
            pass


def stamp():
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + (".%03dZ" % int(now % 1 * 1000))


def connect(url, timeout, context=None):
    """A socket connected to an http://, https:// (TLS by `context`, else the system's trust), unix:// (a path) or
    tcp:// address; OSError when it does not connect."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme == "unix":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(parts.path)
        except OSError:
            sock.close()
            raise
        return sock
    default = 443 if parts.scheme == "https" else 80
    sock = socket.create_connection((parts.hostname, parts.port or default), timeout=timeout)
    if parts.scheme == "https":
        import ssl  # pylint: disable=import-outside-toplevel
        try:
            sock = (context or ssl.create_default_context()).wrap_socket(sock, server_hostname=parts.hostname)
        except OSError:
            sock.close()
            raise
    return sock


def unchunk(body):
    """A chunked body (Transfer-Encoding: chunked) as its bytes; OSError when it is cut or malformed."""
    out, at = [], 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            raise OSError("the chunked answer was cut")
        try:
            size = int(body[at:end].split(b";")[0], 16)
        except ValueError:
            raise OSError("a malformed chunk size: %r" % body[at:end][:20]) from None
        if size == 0:
            return b"".join(out)
        if end + 2 + size > len(body):
            raise OSError("the chunked answer was cut")
        out.append(body[end + 2:end + 2 + size])
        at = end + 2 + size + 2


def exchange(sock, host, method, path, headers=None):
    """(status, body) of one HTTP/1.1 request on a connected socket, closed after (Connection: close; a POST sends
    an empty body); OSError when the answer is cut, late (the socket's timeout) or no HTTP."""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: %s" % host, "Connection: close", "Accept-Encoding: identity"]
    lines += ["Content-Length: 0"] if method == "POST" else []
    lines += ["%s: %s" % item for item in (headers or {}).items()]
    chunks = []
    try:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        while True:
            data = sock.recv(65536)
            if not data:
                break
            chunks.append(data)
    finally:
        sock.close()
    head, blank, body = b"".join(chunks).partition(b"\r\n\r\n")
    status_line, *fields = head.decode("latin-1").split("\r\n")
    words = status_line.split(" ", 2)
    if not blank or len(words) < 2 or not words[0].startswith("HTTP/1.") or not words[1].isdigit():
        raise OSError("no HTTP answer: %r" % head[:60])
    fields = dict((name.strip().lower(), value.strip()) for name, _colon, value in (f.partition(":") for f in fields))
    if "chunked" in fields.get("transfer-encoding", "").lower():
        body = unchunk(body)
    elif fields.get("content-length", "").isdigit():
        if len(body) < int(fields["content-length"]):
            raise OSError("the answer was cut: %d of %s bytes" % (len(body), fields["content-length"]))
        body = body[:int(fields["content-length"])]
    return int(words[1]), body


def docker(config, method, path, timeout=10):
    """(status, the answer's JSON or None) of one call to the Docker daemon's API; Doubt when it does not answer.
    The API, not the CLI: a Go binary started three times a second on each router host costs a core-minute in ten."""
    address = config.get("docker") or "unix:///var/run/docker.sock"
    try:
        status, body = exchange(connect(address, timeout), "docker", method, path)
        return status, json.loads(body) if body.strip() else None
    except (OSError, ValueError) as e:
        raise Doubt("the Docker daemon (%s) did not answer %s %s: %s" % (address, method, path, e or type(e).__name__)) \
            from None


def running_since(config, name):
    """The container's start time when it runs; None when it does not run (or does not exist). Doubt when Docker
    does not answer."""
    status, found = docker(config, "GET", "/containers/%s/json" % urllib.parse.quote(name, safe=""))
    if status == 404:
        return None
    if status != 200 or not isinstance(found, dict):
        raise Doubt("the Docker daemon answered %d for %s: %s" % (status, name, found))
    state = found.get("State") or {}
    return state.get("StartedAt") if state.get("Running") else None


def start(config, name):
    """docker start: 'ok', or the daemon's words."""
    try:
        status, found = docker(config, "POST", "/containers/%s/start" % urllib.parse.quote(name, safe=""), timeout=30)
    except Doubt as e:
        return str(e)
    return "ok" if status in (204, 304) else "%d %s" % (status, (found or {}).get("message", ""))


def start_apart(config, name):
    """docker start in a child process of its own, the check's verdict (give the address up) not waiting on it: keepalived
    reads the verdict at the script's exit, and a start takes 1-2 s on a busy host (the address moved 3.6 s after a
    `docker kill` in a CI run, the start waited on). One start at a time (a lock the child holds): 'starting it again',
    or 'a start is already under way'; the child logs the start's outcome."""
    fd = os.open(os.path.join(config["state_dir"], "start.lock"), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return "a start is already under way"
    if os.fork():
        os.close(fd)  # the lock stays with the child's copy of the descriptor
        return "starting it again"
    try:  # the child: its own session, no hold on the caller's pipes (keepalived's, or a test's)
        os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for std in (0, 1, 2):
            os.dup2(null, std)
        say("%s started again (%s)" % (name, start(config, name)))
    finally:
        os._exit(0)  # pylint: disable=protected-access


class HTTPStatusError(OSError):
    """An answer other than 2xx (as urllib's HTTPError): its status in `code`."""

    def __init__(self, url, code):
        super().__init__("%s answered %d" % (url, code))
        self.code = code


def ask(url, method="GET", timeout=2, context=None, headers=None):
    """(status, text) of a 2xx answer; HTTPStatusError for another status, OSError when there is no answer."""
    parts = urllib.parse.urlsplit(url)
    try:
        status, body = exchange(connect(url, timeout, context), parts.netloc, method,
                                (parts.path or "/") + ("?" + parts.query if parts.query else ""), headers)
    except OSError as e:
        raise OSError("%s: %s" % (url, e or type(e).__name__)) from None
    if not 200 <= status < 300:
        raise HTTPStatusError(url, status)
    return status, body.decode()


def workers(admin):
    return sorted(json.loads(ask(admin + "/list_workers")[1])["urls"])


def healthy(url, timeout=2):
    try:
        return ask(url + "/health", timeout=timeout)[0] == 200
    except OSError:
        return False


def connects(url):
    """True when the worker's host:port takes a TCP connection within CONNECT_TIMEOUT."""
    parts = urllib.parse.urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 80), timeout=CONNECT_TIMEOUT).close()
        return True
    except OSError:
        return False


def at_once(urls, probe):
    """{url: probe(url)} for every url, asked at once (a dead host costs the timeout once, not once each)."""
    import threading  # pylint: disable=import-outside-toplevel
    got = {}
    threads = [threading.Thread(target=lambda u=u: got.__setitem__(u, probe(u))) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


def post(admin, path, url, timeout):
    """One admin call for a worker; False (said) when the router refuses it or does not answer."""
    try:
        ask(admin + path + "?url=" + urllib.parse.quote(url, safe=""), "POST", timeout=timeout)
        return True
    except OSError as e:
        say("%s %s: %s" % (path, url, e))
        return False


def read_json(path, default):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def write_json(path, data):
    with open(path + ".new", "w") as f:
        json.dump(data, f)
    os.replace(path + ".new", path)


@contextlib.contextmanager
def noted_locked(state):
    """evicted.json's path, under its lock (the MASTER notice, the check and the plays take it)."""
    path = os.path.join(state, "evicted.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path


def update_noted(state, change):
    """evicted.json := change(what it holds), under its lock."""
    with noted_locked(state) as path:
        before = read_json(path, [])
        after = sorted(change(set(before)))
        if after != before:
            write_json(path, after)
    return after


def evict(config):
    """On becoming MASTER: the workers whose host takes no connection out of the router, noted in evicted.json."""
    admin, state = config["admin"], config["state_dir"]
    try:
        have = workers(admin)
    except (OSError, ValueError, KeyError) as e:
        say("became MASTER; the router's workers could not be read (%s): none taken out" % e)
        return 0
    dead = [u for u, ok in sorted(at_once(have, connects).items()) if not ok]
    out = []
    for url in dead:
        # noted first, under the lock the plays take too: a worker removed is never one the note lacks
        with noted_locked(state) as path:
            write_json(path, sorted(set(read_json(path, [])) | {url}))
            if post(admin, "/remove_worker", url, 10):
                out.append(url)
    if out:
        say("became MASTER: took out the workers whose host took no connection in %.1f s: %s"
            % (CONNECT_TIMEOUT, ", ".join(out)))
    return 0


def readmit(config, have):
    """The noted workers that answer again back into the router (if still noted: the plays may have dropped
    one meanwhile); the note keeps the others. (What the note holds after, the workers put back.)"""
    admin, state = config["admin"], config["state_dir"]
    noted = read_json(os.path.join(state, "evicted.json"), [])
    waiting = [u for u in noted if u not in have]
    if not waiting:
        return noted, []
    back = [u for u, ok in sorted(at_once(waiting, lambda u: connects(u) and healthy(u, HEALTH_TIMEOUT)).items())
            if ok]
    if not back:
        return noted, []
    with noted_locked(state) as path:
        still = read_json(path, [])
        put = [u for u in back if u in still and post(admin, "/add_worker", u, 30)]
        left = sorted(set(still) - set(put))
        if left != still:
            write_json(path, left)
    if put:
        say("answering again, put back: %s" % ", ".join(put))
    return left, put


def internal_key(config):
    """The internal key (llm_api_key) from key_file, or '' where there is none."""
    try:
        with open(config.get("key_file") or "") as f:
            return f.read().strip()
    except OSError:
        return ""


def signed(key, urls):
    """The published list: the URLs and their HMAC under the internal key, which a peer checks before it takes
    them (whoever answers at a peer's address holds the peers' token, not the key)."""
    listed = {"urls": urls}
    if key:
        import hashlib  # pylint: disable=import-outside-toplevel
        import hmac  # pylint: disable=import-outside-toplevel
        listed["mac"] = hmac.new(key.encode(), LISTED + json.dumps(urls).encode(), hashlib.sha256).hexdigest()
    return listed


def published_already(config, urls, key):
    """Whether the published list holds these URLs, signed under the key as it is now (hashlib and hmac, ~4 ms of
    a check's start, are imported only to sign anew)."""
    was = read_json(config["published"], None)
    try:
        fresh = os.stat(config["published"]).st_mtime >= os.stat(config.get("key_file") or "").st_mtime
    except OSError:  # no list yet (read_json said None), or no key file: nothing it could be older than
        fresh = True
    return isinstance(was, dict) and was.get("urls") == urls and fresh and ("mac" in was) == bool(key)


def peers_workers(config):
    """The workers the other router hosts serve and have noted (their fronts' /gpuserve/router-workers, with the
    internal key), all of them together; None when no peer answers (or there is no peer or no key)."""
    key = internal_key(config)
    peers = config.get("peers") or []
    if not key or not peers:
        return None
    urls = [config["peer_url"].format("[%s]" % p if ":" in p else p) for p in peers]
    # the peers' token (front_auth.js's peer()), not the internal key: whoever answers at a peer's address
    # learns a token that reads the worker list, and cannot sign one (a list of its own would send the clients'
    # requests, and the internal key with them, wherever it names)
    import hashlib  # pylint: disable=import-outside-toplevel
    import hmac  # pylint: disable=import-outside-toplevel
    token = hmac.new(key.encode(), PEERS, hashlib.sha256).hexdigest()

    def listed(url):
        try:
            status, text = ask(url, context=tls_context(config), headers={"Authorization": "Bearer " + token})
            got = json.loads(text) if status == 200 else {}
            if not isinstance(got.get("urls"), list) or not all(isinstance(u, str) for u in got["urls"]):
                return None
            if not hmac.compare_digest(str(got.get("mac", "")), signed(key, got["urls"])["mac"]):
                say("a list of workers at %s is not signed with the internal key: not taken" % url)
                return None
            return sorted(got["urls"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
    lists = [got for got in at_once(urls, listed).values() if got is not None]
    return sorted(set().union(*lists)) if lists else None


def restore(config, record):
    """The workers the peers serve (else those recorded) that answer back into the router, any other out. The
    workers it was given to serve, or None when the router does not answer yet."""
    admin = config["admin"]
    try:
        have = workers(admin)
    except (OSError, ValueError, KeyError):
        return None  # not listening yet
    current = peers_workers(config)
    wanted = record["workers"] if current is None else current
    missing = [u for u in wanted if u not in have]
    answer = at_once(missing, lambda u: connects(u) and healthy(u, HEALTH_TIMEOUT))
    for url in [u for u in missing if answer[u]]:
        post(admin, "/add_worker", url, 30)
    for url in [u for u in have if u not in wanted]:
        post(admin, "/remove_worker", url, 10)
    # the wanted ones that do not answer now: noted, put back when they do (not lost with the next record); with
    # the peers' list, a worker noted here before that the plays have since taken out is dropped from the note
    down = set(u for u in missing if not answer[u])
    update_noted(config["state_dir"], lambda noted: (noted if current is None else noted & set(wanted)) | down)
    say("workers restored (%s): %s" % ("as the other router hosts serve them" if current is not None else
                                       "as recorded here: no other router host answered", ", ".join(workers(admin))))
    return wanted


def main(path, event=None):
    with open(path) as f:
        config = json.load(f)
    LOG["path"] = os.path.join(config["state_dir"], "check.log")
    if event in ("master", "backup", "fault"):
        say("keepalived: this host is %s now" % event.upper())
        return evict(config) if event == "master" else 0
    try:
        verdict, why = check(config)
    except Doubt as e:
        return doubted(config, str(e))
    return settle(config, verdict, why)


def settle(config, verdict, why):
    """The verdict, said in check.log when it changed."""
    path = os.path.join(config["state_dir"], "verdict.json")
    last = read_json(path, {})
    if last.get("verdict") != verdict or last.get("doubts"):
        write_json(path, {"verdict": verdict, "doubts": 0})
    if last.get("verdict") != verdict:
        say("may hold the address: its front answers" if verdict == 0 else "gives the address up: %s" % why)
    return verdict


def doubted(config, why):
    """The last verdict kept while fewer than DOUBTS checks in a row could not tell; then 1."""
    path = os.path.join(config["state_dir"], "verdict.json")
    last = read_json(path, {})
    doubts = last.get("doubts", 0) + 1
    verdict = last.get("verdict", 1) if doubts < DOUBTS else 1
    write_json(path, {"verdict": verdict, "doubts": doubts})
    if doubts < DOUBTS:
        say("could not tell (%d of %d in a row), keeps its verdict %d: %s" % (doubts, DOUBTS, verdict, why))
    elif doubts == DOUBTS or last.get("verdict") != 1:
        say("gives the address up: %d checks in a row could not tell (the last: %s)" % (doubts, why))
    return verdict


def check(config):
    """(0, None) when this host may hold the address, else (1, why); Doubt when it cannot tell."""
    state = config["state_dir"]
    if os.path.exists(os.path.join(state, "stopped")):
        return 1, "the plays stopped the router (stop.yml or remove.yml)"
    record_path = os.path.join(state, "workers.json")
    recorded = read_json(record_path, None)
    replacing = bool(recorded) and "replacing" in recorded  # the plays are starting a new router container
    if replacing and time.time() - os.path.getmtime(record_path) > config.get("mark_secs", MARK_SECS):
        # a run that marked a replacement and ended before it started one: this check starts what is there again
        say("the plays' mark of a router being replaced is older than %d s: a run ended before it started one; "
            "the router is started here again" % config.get("mark_secs", MARK_SECS))
        write_json(record_path, {})
        replacing, recorded = False, None
    since = {}  # each container asked once a check
    for name in config["containers"]:
        if replacing and name == config["router"]:
            continue  # the plays' to start
        since[name] = running_since(config, name)
        if since[name] is None:
            say("%s was not running: %s" % (name, start_apart(config, name)))
            return 1, "%s was not running" % name
    started = since[config["router"]] if config["router"] in since else running_since(config, config["router"])
    if started is None:
        return 1, "no router container runs (the plays are starting one)"
    if replacing:
        if started == recorded["replacing"]:
            try:  # the old one still runs: noted workers put back, nothing recorded from it
                readmit(config, workers(config["admin"]))
            except (OSError, ValueError, KeyError):
                pass
            return front_answers(config)
        recorded = None  # the plays' new container: recorded anew
    restored = bool(recorded) and recorded.get("started") != started
    if restored:
        wanted = restore(config, recorded)
        if wanted is None:
            return 1, "its router started again and does not answer yet"
        record = dict(recorded, started=started, workers=wanted)
    else:
        try:
            have = workers(config["admin"])
            noted, put = readmit(config, have)
            record = {"started": started, "workers": sorted(set(have) | set(put) | set(noted))}
        except (OSError, ValueError, KeyError) as e:
            raise Doubt("the router's workers could not be read: %s" % e) from None
    # written unless the plays marked a replacement since it was read (their mark wins)
    if record != recorded and "replacing" not in (read_json(record_path, None) or {}) or replacing:
        write_json(record_path, record)
    published = config.get("published")
    key = internal_key(config) if published else ""
    if published and not published_already(config, record["workers"], key):
        try:
            write_json(published, signed(key, record["workers"]))
            os.chmod(published, 0o644)  # nginx's workers (not root) read it
        except OSError as e:  # the front's folder is not made yet
            say("could not publish the workers for the other router hosts: %s" % e)
    if restored:
        return 1, "its router started again: given its workers back, it may hold the address from the next check"
    return front_answers(config)


def tls_context(config):
    """For a front with llm_tls: verified with the collection's CA; a given certificate, which need not name the
    address asked here, is checked by the plays and preflight instead (None for plain HTTP)."""
    if not config["health"].startswith("https:"):
        return None
    import ssl  # pylint: disable=import-outside-toplevel
    context = ssl.create_default_context(cafile=config["cafile"] or None)
    if not config["cafile"]:
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    return context


def front_answers(config):
    """(0, None) when the front's /health is 200 (the router ready with at least one worker), (1, why) when it
    answers another status; Doubt when it does not answer."""
    try:
        status = ask(config["health"], context=tls_context(config))[0]
        return (0, None) if status == 200 else (1, "the front's /health answered %d" % status)
    except HTTPStatusError as e:
        return 1, "the front's /health answered %d" % e.code
    except OSError as e:
        raise Doubt("the front's /health did not answer: %s" % e) from None


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
