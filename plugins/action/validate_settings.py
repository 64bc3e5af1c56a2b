# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import display, load_specs, validate

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ActionModule(ActionBase):
    """Runs on the controller: validation needs nothing from the host and changes nothing.

    It reads every setting in scope itself (the llm_ settings and each role's knobs, by the roles'
    prefixes), so that no setting escapes it, and returns them typed: `settings` (secrets included:
    run it with no_log) and `display` (secrets masked), beside the findings.
    """

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset()

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        specs = load_specs(COLLECTION)
        given, unresolved = {}, []
        for name in sorted(task_vars or {}):
            if not specs.is_setting(name):
                continue
            try:
                given[name] = self._templar.template(task_vars[name])
            except AnsibleError as e:
                # A setting built from another that is missing: name it, never its text (it may hold a secret).
                unresolved.append(finding("E_CONFIG", name, "%s could not be resolved: %s" % (
                    name, type(e).__name__ if name in specs.secret() else str(e).splitlines()[0]), variable=name))
        findings, values = validate(given, specs.options, specs.internal, (task_vars or {}).get("group_names", ()))
        findings = unresolved + findings
        result.update(changed=False, findings=findings, errors=len([f for f in findings if f["severity"] == "error"]),
                      settings=values, display=display(values, specs.options))
        return result
