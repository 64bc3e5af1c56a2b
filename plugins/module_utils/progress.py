# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Progress of a job running in the background (async), through a file the job writes and
gpuserve.llm.job_progress reads: bytes done of due (Progress, the weights transfers) or the step
under way (StepFile, verify and bench), and the line the playbook prints for it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import threading
import time

from ansible_collections.gpuserve.llm.plugins.module_utils.atomic_file import write_json


class Progress(object):
    """Writes {phase, done, total, ...} to a file every few seconds for the progress lines the
    playbook prints while the module runs in the background."""

    def __init__(self, path, interval=1.0):
        self.path = path
        self.interval = interval
        self.lock = threading.Lock()
        self.state = {"phase": "starting", "done": 0, "total": 0, "started": time.time()}
        self.measure = None
        self._stop = threading.Event()
        self._thread = None

    def phase(self, name, total, measure=None):
        with self.lock:
            self.state.update(phase=name, done=0, total=total, phase_started=time.time())
            self.measure = measure
        self.write()

    def add(self, n):
        with self.lock:
            self.state["done"] += n

    def write(self):
        if not self.path:
            return
        with self.lock:
            if self.measure is not None:
                try:
                    self.state["done"] = self.measure()
                except OSError:
                    pass
            self.state["updated"] = time.time()
            data = dict(self.state)
        try:
            write_json(self.path, data, mode=None)
        except (IOError, OSError):
            pass

    def _run(self):
        while not self._stop.wait(self.interval):
            self.write()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run)
        self._thread.daemon = True
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.write()


class StepFile(object):
    """A step-counting job's progress file."""

    def __init__(self, path, total):
        self.path, self.total, self.done, self.started = path, total, 0, time.time()

    def __call__(self, what):
        """Record that the next step, `what`, begins."""
        self.done += 1
        if not self.path:
            return
        write_json(self.path, {"line": "step %d of %d: %s" % (self.done, self.total, what), "started": self.started})


def human(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" if unit == "B" else "%.1f %s") % (n, unit)
        n /= 1024.0


def progress_line(state, now=None):
    """One line for a host: what it is doing, bytes done of total, the rate since the phase began."""
    if not state:
        return "starting"
    now = now or time.time()
    if "line" in state:  # a job that counts steps, not bytes (verify, bench)
        return "%s, %d s" % (state["line"], int(now - state.get("started", now)))
    done, total = state.get("done", 0), state.get("total", 0)
    elapsed = max(now - state.get("phase_started", state.get("started", now)), 1e-6)
    pct = (100.0 * done / total) if total else 100.0
    return "%s: %s of %s (%d%%), %s/s, %d s" % (
        state.get("phase", "working"), human(done), human(total), pct, human(done / elapsed),
        int(now - state.get("started", now)))
