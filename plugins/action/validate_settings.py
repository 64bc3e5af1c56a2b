# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os

import yaml

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.llm.plugins.module_utils.settings import validate

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _spec_options():
    """The llm role's options, and every llm_ option any role documents (known names)."""
    with open(os.path.join(COLLECTION, "roles", "llm", "meta", "argument_specs.yml")) as f:
        options = yaml.safe_load(f)["argument_specs"]["main"]["options"]
    known = set()
    for path in glob.glob(os.path.join(COLLECTION, "roles", "*", "meta", "argument_specs.yml")):
        with open(path) as f:
            for entry in (yaml.safe_load(f) or {}).get("argument_specs", {}).values():
                known.update(n for n in (entry.get("options") or {}) if n.startswith("llm_"))
    return options, known


class ActionModule(ActionBase):
    """Runs on the controller: validation needs nothing from the host and changes nothing."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("settings",))

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        settings = self._task.args.get("settings") or {}
        options, known = _spec_options()
        findings = validate(dict(settings), options, known)
        result.update(changed=False, findings=findings,
                      errors=len([f for f in findings if f["severity"] == "error"]))
        return result
