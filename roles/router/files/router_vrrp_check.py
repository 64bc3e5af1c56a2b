"""keepalived's check of a router host (gpuserve.llm, roles/router): exit 0 = this host may hold router_vip.

Run as root every router_vrrp_check_interval seconds (vrrp_script), with the check's configuration (JSON,
written by the router role) as its argument. In order:
1. the plays stopped the router (stop.yml, remove.yml: the `stopped` mark): give the address up;
2. the router or its front container is not running (a crash, an OOM kill, `docker kill`, which Docker's
   restart policy does not undo): start it again, give the address up this time;
3. the router container started since the workers were last recorded (started again here, or by its
   daemon): put back the workers recorded, those that answer their health check, and take out any other;
   give the address up this time;
4. record the router's workers as the plays left them (the record a router started again is given back);
5. put back the workers taken out on becoming MASTER (below) that answer again;
6. the front's /health (the router ready with at least one worker): 200 or give the address up.
With `master` after the configuration (keepalived's notify_master, when this host takes the address): take out
of the router every worker that does not answer its /health within EVICT_TIMEOUT, and note them in evicted.json.
The router would go on sending them requests until its own health checks mark them (each such request waits on a
dead host before it is retried elsewhere); a router host that stopped takes its engine with it. The plays
(router_workers' evicted_file) drop a worker they add or remove from the note: the check never puts back a worker
the plays took out. The record of step 4 holds the workers noted, so a router started again gets them back too.
Standard library only; what it did goes to standard error (keepalived's log) in one line.
"""
import fcntl
import json
import os
import ssl
import subprocess
import sys
import threading
import urllib.parse
import urllib.request

EVICT_TIMEOUT = 0.5  # seconds for a worker's /health on becoming MASTER (and to be put back): a slow one is back later


def say(text):
    sys.stderr.write("gpuserve router check: %s\n" % text)


def running_since(name):
    """The container's start time when it runs; None when it does not (or does not exist)."""
    got = subprocess.run(["docker", "inspect", "-f", "{{.State.Running}} {{.State.StartedAt}}", name],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=10, check=False)
    words = got.stdout.split()
    return words[1] if got.returncode == 0 and words[:1] == ["true"] else None


def ask(url, method="GET", timeout=2, context=None):
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=timeout, context=context) as r:
        return r.status, r.read().decode()


def workers(admin):
    return sorted(json.loads(ask(admin + "/list_workers")[1])["urls"])


def healthy(url, timeout=2):
    try:
        return ask(url + "/health", timeout=timeout)[0] == 200
    except OSError:
        return False


def answering(urls, timeout):
    """{url: healthy} for every url, asked at once (a dead host costs the timeout once, not once each)."""
    got = {}
    threads = [threading.Thread(target=lambda u=u: got.__setitem__(u, healthy(u, timeout))) for u in urls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return got


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


def update_noted(state, change):
    """evicted.json := change(what it holds), under a lock: the MASTER notice and the check run side by side."""
    path = os.path.join(state, "evicted.json")
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = read_json(path, [])
        after = sorted(change(set(before)))
        if after != before:
            write_json(path, after)
    return after


def evict(config):
    """On becoming MASTER: the workers that do not answer out of the router, noted in evicted.json."""
    admin = config["admin"]
    try:
        have = workers(admin)
    except (OSError, ValueError, KeyError):
        return 0  # no router answering: the check gives the address up
    dead = [u for u, ok in sorted(answering(have, EVICT_TIMEOUT).items()) if not ok]
    if not dead:
        return 0
    for url in dead:
        ask(admin + "/remove_worker?url=" + urllib.parse.quote(url, safe=""), "POST", timeout=10)
        update_noted(config["state_dir"], lambda noted, url=url: noted | {url})  # noted as each goes
    say("became MASTER: took out the workers that did not answer in %.1f s: %s" % (EVICT_TIMEOUT, ", ".join(dead)))
    return 0


def readmit(config, have):
    """The evicted workers that answer again back into the router; the note keeps the others."""
    admin, path = config["admin"], os.path.join(config["state_dir"], "evicted.json")
    noted = read_json(path, [])
    if not noted:
        return noted
    back = [u for u, ok in sorted(answering([u for u in noted if u not in have], EVICT_TIMEOUT).items()) if ok]
    for url in back:
        ask(admin + "/add_worker?url=" + urllib.parse.quote(url, safe=""), "POST", timeout=30)
    if back:
        say("answering again, put back: %s" % ", ".join(back))
    # in the router now (put back here, or by the plays): no longer noted
    return update_noted(config["state_dir"], lambda left: left - set(have) - set(back))


def restore(config, record):
    """The recorded workers that answer back into the router, any other out. True when done."""
    admin = config["admin"]
    try:
        have = workers(admin)
    except (OSError, ValueError, KeyError):
        return False  # not listening yet
    for url in [u for u in record["workers"] if u not in have and healthy(u)]:
        ask(admin + "/add_worker?url=" + urllib.parse.quote(url, safe=""), "POST", timeout=30)
    for url in [u for u in have if u not in record["workers"]]:
        ask(admin + "/remove_worker?url=" + urllib.parse.quote(url, safe=""), "POST", timeout=10)
    say("workers restored: %s" % ", ".join(workers(admin)))
    return True


def main(path, event=None):
    with open(path) as f:
        config = json.load(f)
    if event == "master":
        return evict(config)
    state = config["state_dir"]
    if os.path.exists(os.path.join(state, "stopped")):
        return 1
    for name in config["containers"]:
        if running_since(name) is None:
            got = subprocess.run(["docker", "start", name], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                 text=True, timeout=30, check=False)
            say("%s was not running: started again (%s)" % (name, "ok" if got.returncode == 0 else got.stderr.strip()))
            return 1
    started = running_since(config["router"])
    record_path = os.path.join(state, "workers.json")
    recorded = read_json(record_path, None)
    if recorded and "replacing" in recorded:  # the plays are starting a new router container
        if started == recorded["replacing"]:
            return front_answers(config)  # the old one still runs: nothing recorded from it
        recorded = None  # the plays' new container: recorded anew
    restored = bool(recorded) and recorded.get("started") != started
    if restored:
        if not restore(config, recorded):
            return 1
        record = dict(recorded, started=started)
    else:
        try:
            noted = readmit(config, workers(config["admin"]))
            record = {"started": started, "workers": sorted(set(workers(config["admin"])) | set(noted))}
        except (OSError, ValueError, KeyError):
            return 1
    if record != recorded:
        write_json(record_path, record)
    if restored:
        return 1  # the address from the next check on
    return front_answers(config)


def front_answers(config):
    """0 when the front's /health is 200 (the router ready with at least one worker), else 1."""
    context = None
    if config["health"].startswith("https:"):
        context = ssl.create_default_context(cafile=config["cafile"] or None)
        if not config["cafile"]:  # a given certificate: checked by the plays, not here on loopback
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        return 0 if ask(config["health"], context=context)[0] == 200 else 1
    except OSError:
        return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
