"""How the fleet scales (issue 24 item 3): a no-op rerun of site.yml on 1, 4 and 8 SSH hosts.

A BENCHMARK, not a test: tests/run.sh does not run it, and it asserts only what makes its figures
mean something (every host served, the timed reruns change nothing). It measures the workstation's
side of a rerun: ansible-playbook's wall time and the CPU seconds of its whole process tree
(ansible-playbook, its forks, the ssh clients and their ControlPersist masters).

The hosts are the SSH test hosts of the playbook tests (tests/integration/ssh_hosts.py: containers
from the test-host image, each with its own sshd on 127.0.0.1, a key made per run, host keys checked
through the run's known_hosts, the user `deploy` becoming root through sudo). They share the test
bed's Docker daemon through its socket, as molecule's hosts do, so the host stage is off
(`host_setup: false`); each host has its own llm_port, llm_container_name and llm_data_dir (mounted
at the same path inside and out: the daemon resolves the engine's bind mounts on the machine). The
cheapest honest configuration: llama.cpp on the CPU (`llm_gpus: []`) with burn-in weights.

Bring-up, once: the first host from nothing (host_venv makes /opt/gpuserve), then its /opt/gpuserve
copied into the others (the venv and wheelhouse host_venv would make, at the same path in the same
image), then site.yml on all of them. Then for each N, an inventory of the first N hosts and
`ansible-playbook site.yml -f FORKS`, timed, `changed=0` asserted on every host; optionally one
more rerun with the ansible.posix.profile_tasks callback for where the time goes (not timed: the
callback costs CPU too).

CPU seconds: the script makes itself the child subreaper (prctl PR_SET_CHILD_SUBREAPER), so the SSH
masters that ssh forks into the background come back to it when ansible-playbook exits; after each
run it ends them (ssh -O exit) and reaps them, so their CPU (SSH's encryption) is counted in
getrusage(RUSAGE_CHILDREN) with the rest. Each timed run starts with no SSH master (connection set-up
included, as on a rerun after ControlPersist's 60 s).

    DOCKER_HOST=... .venv/bin/python scripts/fleet_scale.py --sizes 1,4,8 --json fleet-scale.json
    # the test bed's daemon: GPUSERVE_TEST_DOCKER_HOST, else tests/testbed/dockerd.sh start (stopped after)
"""
import argparse
import ctypes
import datetime
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.join(ROOT, "tests")
sys.path[:0] = [os.path.join(TESTS, "integration")]
from ssh_hosts import SSHHosts  # noqa: E402  (test plumbing, reused)

BIN = os.path.dirname(sys.executable)
PORT0 = 18900  # host i serves on PORT0 + i
PR_SET_CHILD_SUBREAPER = 36
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def log(msg):
    print("[%s] %s" % (datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S"), msg), flush=True)


def host_requirements():
    """requirements-host.txt with the pynvml test double in place of nvidia-ml-py (as the tests install)."""
    with open(os.path.join(ROOT, "requirements-host.txt")) as f:
        reqs = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    return [r for r in reqs if not r.startswith("nvidia-ml-py")] + ["nvml-replay==0.1.0"]


def reap():
    """Reap every child that has ended (the SSH masters reparented to this process among them)."""
    while True:
        try:
            pid = os.waitpid(-1, os.WNOHANG)[0]
        except ChildProcessError:
            return
        if pid == 0:
            return


def cpu_children():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Bench(object):
    def __init__(self, args, docker_host, image, wheelhouse, workdir):
        self.args, self.docker_host, self.image, self.wheelhouse = args, docker_host, image, wheelhouse
        self.workdir = workdir
        self.sock = docker_host[len("unix://"):]
        self.names = ["gpuserve-scale-%d-h%d" % (os.getpid(), i + 1) for i in range(max(args.sizes))]
        self.data = dict((n, os.path.join(workdir, "data", n)) for n in self.names)
        for d in self.data.values():
            os.makedirs(d)
        data = os.path.join(workdir, "data", "{name}")  # SSHHosts puts each host's name in
        run_args = ["-v", "%s:/var/run/docker.sock" % self.sock, "-v", "%s:%s" % (data, data)]
        self.hosts = SSHHosts(docker_host, workdir, image, self.names, run_args, users=("deploy",))

    def hostvars(self, i, name):
        found = dict(self.hosts.inventory_vars(name))
        found.update(
            llm_port=PORT0 + i, llm_container_name="gpuserve-scale-e%d" % (i + 1), llm_data_dir=self.data[name],
            llm_docker_host="unix:///var/run/docker.sock")
        return found

    def inventory(self, names):
        path = os.path.join(self.workdir, "hosts-%d.yml" % len(names))
        common = dict(
            # The hosts share the test bed's daemon through its socket: no host stage (as molecule's hosts).
            host_setup=False, host_venv_wheelhouse=self.wheelhouse, host_venv_packages=host_requirements(),
            # llama.cpp on the CPU with burn-in weights: the cheapest honest served state.
            llm_engine="llamacpp", llm_gpus=[], llm_weights="dummy", llm_model="gpuserve/tiny-llama-dummy",
            llm_model_max_context=8192, llm_context=2048, llm_max_tokens=256, llm_parallel=2, llm_dense="q4",
            llm_model_dense="q4", llm_kv="bf16", llm_drafter="off", llm_vision=False, llm_reserve_gib=0,
            llm_kv_cap_gib=0, llm_host="127.0.0.1", llm_served_model_name="tiny",
            preflight_min_free_mib=1000, preflight_disk_checkpoint_gib=1, preflight_disk_image_gib=1,
            preflight_disk_kernels_gib=1, service_ulimits=[], autotune_llamacpp=False,
            image_debian_cache=os.environ.get("GPUSERVE_TEST_IMAGE_CACHE", os.path.join(ROOT, ".work", "images-debian")))
        hosts = dict((n, self.hostvars(self.names.index(n), n)) for n in names)
        with open(path, "w") as f:
            yaml.safe_dump({"llm_hosts": {"hosts": hosts, "vars": common}}, f)
        return path

    def end_masters(self):
        """End every SSH master of the run (ssh -O exit), wait for them, reap them."""
        cp = self.hosts.control_dir
        for sock in os.listdir(cp) if os.path.isdir(cp) else []:
            subprocess.run(["ssh", "-o", "ControlPath=%s" % os.path.join(cp, sock), "-O", "exit", "x"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=30)
        deadline = time.monotonic() + 20
        while os.path.isdir(cp) and os.listdir(cp) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        reap()

    def playbook(self, names, *extra, **env_extra):
        """site.yml of a checkout (`checkout=`, default this one) on the hosts: (rc, output, wall s, CPU s of
        the process tree)."""
        root = env_extra.pop("checkout", ROOT)
        env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(root, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable,
                   DOCKER_HOST=self.docker_host, **self.hosts.env())
        env.pop("NVML_REPLAY_SCENARIO", None)
        env.update(env_extra)
        argv = [os.path.join(BIN, "ansible-playbook"), os.path.join(root, "site.yml"), "-i", self.inventory(names),
                "-f", str(self.args.forks)] + list(extra)
        self.end_masters()
        cpu0, t0 = cpu_children(), time.monotonic()
        proc = subprocess.run(argv, cwd=self.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=1800, check=False)
        wall = time.monotonic() - t0
        self.end_masters()
        cpu = cpu_children() - cpu0
        with open(os.path.join(self.workdir, "ansible-playbook.log"), "a") as f:
            f.write("### %s\n%s\n" % (" ".join(argv), proc.stdout))
        return proc.returncode, proc.stdout, wall, cpu

    def seed(self):
        """The first host's /opt/gpuserve (host_venv's virtualenv and wheelhouse) into the others."""
        first = self.names[0]
        tar = subprocess.run(["docker", "-H", self.docker_host, "exec", first, "tar", "-C", "/opt", "-c", "gpuserve"],
                             stdout=subprocess.PIPE, check=True).stdout
        for name in self.names[1:]:
            subprocess.run(["docker", "-H", self.docker_host, "exec", "-i", name, "tar", "-C", "/opt", "-x"],
                           input=tar, stdout=subprocess.PIPE, check=True)

    def engines(self):
        got = subprocess.run(["docker", "-H", self.docker_host, "ps", "-a", "--filter", "name=gpuserve-scale-e",
                              "--format", "{{.Names}}"], stdout=subprocess.PIPE, text=True, check=True)
        return got.stdout.split()

    def cleanup(self):
        engines = self.engines()
        if engines:
            subprocess.run(["docker", "-H", self.docker_host, "rm", "-f", "-v"] + engines,
                           stdout=subprocess.DEVNULL, check=False)
        self.hosts.stop()
        reap()


def profile_lines(output, limit=12):
    """profile_tasks' task lines: [(task, seconds)], the costliest first (its own order)."""
    found = []
    for m in re.finditer(r"^(.+?) -+ (\d+\.\d+)s$", output, re.M):
        found.append((m.group(1).strip(), float(m.group(2))))
    return found[:limit]


def play_lines(output):
    """The plays of a run, each with how many batches it ran (a serial play prints its PLAY line per batch)."""
    plays = []
    for name in re.findall(r"^PLAY \[(.+?)\] \*", output, re.M):
        if plays and plays[-1][0] == name:
            plays[-1][1] += 1
        else:
            plays.append([name, 1])
    return ["%s%s" % (name, " (%d batches)" % k if k > 1 else "") for name, k in plays if name != "PLAY RECAP"]


def describe(root):
    got = subprocess.run(["git", "-C", root, "log", "-1", "--format=%h %s"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, check=False).stdout.strip()
    return (got[:60] or "not a git checkout") + (", with changes" if dirty else "")


def check_recap(output, names, what):
    recap = dict((m.group(1), (int(m.group(3)), int(m.group(4)), int(m.group(5)))) for m in RECAP.finditer(output))
    # localhost: the tasks delegated to the workstation (reports, the image's root) have a line of their own.
    bad = [n for n in names if recap.get(n) != (0, 0, 0)] + [n for n in recap if n not in names and recap[n] != (0, 0, 0)]
    if bad or not set(names) <= set(recap) or set(recap) - set(names) - {"localhost"}:
        raise SystemExit("%s: not changed=0 unreachable=0 failed=0 on %s (recap %s); the tail:\n%s" % (
            what, bad, recap, output[-4000:]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", maxsplit=1)[0])
    ap.add_argument("--sizes", default="1,4,8", help="fleet sizes, comma-separated (default 1,4,8)")
    ap.add_argument("--forks", type=int, default=8, help="ansible-playbook -f (default 8; at least the largest size)")
    ap.add_argument("--repeats", type=int, default=2, help="timed reruns per size (the table takes the lowest CPU)")
    ap.add_argument("--profile", action="store_true", help="one more rerun per size with profile_tasks")
    ap.add_argument("--json", default=os.path.join(ROOT, ".work", "fleet-scale.json"), help="where the figures go")
    ap.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH",
                    help="also time the reruns with another checkout's site.yml (e.g. the branch point), on the same hosts")
    ap.add_argument("--keep", action="store_true", help="leave the work folder (inventories, the playbook log)")
    args = ap.parse_args()
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    if args.forks < max(args.sizes):
        ap.error("--forks must be at least the largest size (%d)" % max(args.sizes))
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit("prctl(PR_SET_CHILD_SUBREAPER) failed: the SSH masters' CPU could not be counted")

    started_daemon = False
    docker_host = os.environ.get("GPUSERVE_TEST_DOCKER_HOST")
    if not docker_host:
        out = subprocess.run([os.path.join(TESTS, "testbed", "dockerd.sh"), "start"], stdout=subprocess.PIPE,
                             text=True, check=True).stdout.strip()
        docker_host, started_daemon = out.split("=", 1)[1], True
    env = dict(os.environ, DOCKER_HOST=docker_host)
    image = os.environ.get("GPUSERVE_TESTHOST_IMAGE") or subprocess.run(
        [os.path.join(TESTS, "testbed", "images.sh")], env=env, stdout=subprocess.PIPE, text=True,
        check=True).stdout.strip()
    wheelhouse = subprocess.run([os.path.join(TESTS, "testbed", "wheelhouse.sh"), sys.executable],
                                stdout=subprocess.PIPE, text=True, check=True).stdout.strip()
    # Short: the data folders are bind-mounted at the same path; /tmp, not the checkout (a daemon's mounts).
    workdir = tempfile.mkdtemp(prefix="gpuserve-scale-")
    bench = Bench(args, docker_host, image, wheelhouse, workdir)
    results = dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
                   machine="%s, %d cores" % (platform.machine(), os.cpu_count()), forks=args.forks,
                   python=platform.python_version(), checkouts=[], setup={})
    try:
        t0 = time.monotonic()
        bench.hosts.start()
        log("%d SSH hosts up in %.0f s" % (len(bench.names), time.monotonic() - t0))
        rc, out, wall, cpu = bench.playbook(bench.names[:1])
        if rc != 0:
            raise SystemExit("bring-up of %s failed (rc %d):\n%s" % (bench.names[0], rc, out[-6000:]))
        results["setup"]["first_host"] = dict(wall_s=round(wall, 1), cpu_s=round(cpu, 1))
        log("first host served: %.0f s wall, %.1f s CPU" % (wall, cpu))
        if len(bench.names) > 1:
            bench.seed()
            rc, out, wall, cpu = bench.playbook(bench.names)
            if rc != 0:
                raise SystemExit("bring-up of the fleet failed (rc %d):\n%s" % (rc, out[-6000:]))
            results["setup"]["fleet"] = dict(hosts=len(bench.names), wall_s=round(wall, 1), cpu_s=round(cpu, 1))
            log("%d hosts served: %.0f s wall, %.1f s CPU" % (len(bench.names), wall, cpu))
        checkouts = [("this checkout (%s)" % describe(ROOT), ROOT)] + [tuple(c.split("=", 1)) for c in args.compare]
        for label, root in checkouts:
            results["checkouts"].append(dict(label=label, path=root, sizes=[]))
        for n in args.sizes:
            names = bench.names[:n]
            for label, root in checkouts:
                runs = []
                for r in range(args.repeats):
                    rc, out, wall, cpu = bench.playbook(names, checkout=root)
                    if rc != 0:
                        raise SystemExit("%s: rerun on %d hosts failed (rc %d):\n%s" % (label, n, rc, out[-6000:]))
                    check_recap(out, names, "%s: rerun on %d hosts" % (label, n))
                    runs.append(dict(wall_s=round(wall, 2), cpu_s=round(cpu, 2)))
                    log("%s, N=%d rerun %d: %.1f s wall, %.2f s CPU (%.2f s a host), changed=0" % (
                        label, n, r + 1, wall, cpu, cpu / n))
                best = min(runs, key=lambda x: x["cpu_s"])
                row = dict(hosts=n, runs=runs, wall_s=best["wall_s"], cpu_s=best["cpu_s"],
                           cpu_s_per_host=round(best["cpu_s"] / n, 2))
                if args.profile:
                    rc, out, wall, cpu = bench.playbook(
                        names, checkout=root, ANSIBLE_CALLBACKS_ENABLED="ansible.posix.profile_tasks",
                        PROFILE_TASKS_TASK_OUTPUT_LIMIT="25")
                    check_recap(out, names, "%s: profiled rerun on %d hosts" % (label, n))
                    row["profile"] = dict(wall_s=round(wall, 1), cpu_s=round(cpu, 1), tasks=profile_lines(out, 25),
                                          plays=play_lines(out))
                [c for c in results["checkouts"] if c["label"] == label][0]["sizes"].append(row)
        for c in results["checkouts"]:
            base = c["sizes"][0]["cpu_s_per_host"]
            for row in c["sizes"]:
                row["ratio"] = round(row["cpu_s_per_host"] / base, 2)
    finally:
        bench.cleanup()
        if started_daemon:
            subprocess.run([os.path.join(TESTS, "testbed", "dockerd.sh"), "stop"], check=False)
        if args.keep:
            log("work folder kept: %s" % workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=1)
    print("\n%s, %s, forks %d: a no-op rerun of site.yml (changed=0), workstation side" % (
        results["date"], results["machine"], args.forks))
    for c in results["checkouts"]:
        print("\n%s" % c["label"])
        print("%5s %9s %9s %13s %7s" % ("hosts", "wall s", "CPU s", "CPU s/host", "ratio"))
        for row in c["sizes"]:
            print("%5d %9.1f %9.2f %13.2f %7.2f" % (row["hosts"], row["wall_s"], row["cpu_s"], row["cpu_s_per_host"],
                                                    row["ratio"]))
        for row in c["sizes"]:
            if "profile" in row:
                batched = [p for p in row["profile"]["plays"] if p.endswith(" batches)")]
                print("  profile_tasks, %d hosts (%.0f s wall, %.1f s CPU), %d plays; in batches: %s" % (
                    row["hosts"], row["profile"]["wall_s"], row["profile"]["cpu_s"], len(row["profile"]["plays"]),
                    "; ".join(batched) or "none"))
                for task, secs in row["profile"]["tasks"][:10]:
                    print("    %7.2fs  %s" % (secs, task))
    print("\nJSON: %s" % args.json)


if __name__ == "__main__":
    main()
