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
5. the front's /health (the router ready with at least one worker): 200 or give the address up.
Standard library only; what it did goes to standard error (keepalived's log) in one line.
"""
import json
import os
import ssl
import subprocess
import sys
import urllib.parse
import urllib.request


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


def healthy(url):
    try:
        return ask(url + "/health")[0] == 200
    except OSError:
        return False


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


def main(path):
    with open(path) as f:
        config = json.load(f)
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
    try:
        with open(record_path) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        recorded = None
    restored = bool(recorded) and recorded.get("started") != started
    if restored:
        if not restore(config, recorded):
            return 1
        record = dict(recorded, started=started)
    else:
        try:
            record = {"started": started, "workers": workers(config["admin"])}
        except (OSError, ValueError, KeyError):
            return 1
    if record != recorded:
        with open(record_path + ".new", "w") as f:
            json.dump(record, f)
        os.replace(record_path + ".new", record_path)
    if restored:
        return 1  # the address from the next check on
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
    sys.exit(main(sys.argv[1]))
