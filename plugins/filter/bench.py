# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# Documented in bench_changes.yml beside this file (ansible-doc -t filter gpuserve.llm.bench_changes).

from ansible_collections.gpuserve.llm.plugins.module_utils.bench import changes


def bench_changes(previous_text, current):
    return changes(previous_text or "", current or {})


class FilterModule(object):
    def filters(self):
        return {"bench_changes": bench_changes}
