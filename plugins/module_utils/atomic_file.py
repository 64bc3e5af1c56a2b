# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)
"""Files written whole or not at all, and JSON files read back whole or not at all.

A file is written to a temporary file beside it and renamed over it: a reader (a concurrent run,
the progress loop, a killed run's rerun) sees the old file or the new one, never half of either.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import tempfile
from contextlib import contextmanager


@contextmanager
def replacing(path, mode=0o644, suffix=""):
    """Yields a temporary path beside `path` to write; renamed over `path` when the block ends
    without an error (chmod `mode` first; None keeps mkstemp's 0600), removed otherwise. Makes
    the folder when it is missing."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        os.makedirs(folder, 0o755)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix="." + os.path.basename(path) + ".", suffix=suffix)
    os.close(fd)
    try:
        yield tmp
        if mode is not None:
            os.chmod(tmp, mode)
        os.rename(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_bytes(path, data, mode=0o644):
    with replacing(path, mode) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def write_json(path, data, mode=0o644, **dump_args):
    with replacing(path, mode) as tmp:
        with open(tmp, "w") as f:
            json.dump(data, f, **dump_args)


def read_json(path):
    """The file's JSON, or None when it is not there or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (IOError, OSError, ValueError):
        return None
