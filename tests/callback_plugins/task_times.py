# TEST PLUMBING (not the collection's): where the test command's playbook time goes, task by task.
"""Appends one JSON line per task to the file $GPUSERVE_TASK_TIMES: the task's name (with its role), the
play's, its wall time (from its start to the next task's or the play's end, all hosts together), when it
started (epoch seconds: a run's timeline beside the test's own steps) and the run (ansible-playbook's process id).
tests/task_times.py sums them over a test run. Enabled by tests/run.sh and tests/integration/conftest.py
(ANSIBLE_CALLBACKS_ENABLED=task_times); a run without the variable writes nothing."""
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_times
type: aggregate
short_description: each task's wall time as JSON lines (gpuserve.llm's tests)
description: Appends one line per task to the file named by GPUSERVE_TASK_TIMES.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._path = os.environ.get("GPUSERVE_TASK_TIMES")
        self._current = None  # (name, play, started, at)
        self._play = ""

    def _close(self):
        if self._current is None or not self._path:
            self._current = None
            return
        name, play, started, at = self._current
        self._current = None
        with open(self._path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"task": name, "play": play, "s": round(time.monotonic() - started, 3),
                                "at": round(at, 1), "run": os.getpid()}) + "\n")

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._play = play.get_name()

    def _start(self, task):
        self._close()
        self._current = (task.get_name(), self._play, time.monotonic(), time.time())  # the name has its role before it

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start(task)

    def v2_playbook_on_stats(self, stats):
        self._close()
