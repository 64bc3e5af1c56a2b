# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""A step-counting job's progress file, read by gpuserve.llm.job_progress while the job runs async."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import time


class StepFile(object):
    def __init__(self, path, total):
        self.path, self.total, self.done, self.started = path, total, 0, time.time()

    def __call__(self, what):
        """Record that the next step, `what`, begins."""
        self.done += 1
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"line": "step %d of %d: %s" % (self.done, self.total, what), "started": self.started}, f)
        os.rename(tmp, self.path)
