# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import spec_options, validate

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ActionModule(ActionBase):
    """Runs on the controller: validation needs nothing from the host and changes nothing."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("settings",))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        settings = self._task.args.get("settings") or {}
        options, known = spec_options(COLLECTION)
        findings = validate(dict(settings), options, known)
        result.update(changed=False, findings=findings,
                      errors=len([f for f in findings if f["severity"] == "error"]))
        return result
