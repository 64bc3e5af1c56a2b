# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.plugins.action import ActionBase

from ansible_collections.gpuserve.llm.plugins.module_utils import hub_config
from ansible_collections.gpuserve.llm.plugins.module_utils.checkpoint import cached_config, hub_cache_dir
from ansible_collections.gpuserve.llm.plugins.module_utils.settings import TYPED, display, load_specs, validate_templated

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def workstation_config(repo, revision):
    """A hub checkpoint's config.json from this workstation's Hugging Face cache (no network): the model's shape
    for the checks that need it (the GPU split, a vision tower)."""
    return cached_config(hub_cache_dir(os.environ, os.path.expanduser("~")), repo, revision)


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
        task_vars = task_vars or {}
        raw = dict((name, task_vars[name]) for name in task_vars if specs.is_setting(name))

        def render(value, typed):
            """A setting's value rendered; with `typed`, templates that read llm_settings read the values
            validated first (in the first play it is not set yet, in a later one it is the last play's)."""
            if typed is None:
                return self._templar.template(value)
            variables = dict((name, task_vars[name]) for name in task_vars)
            variables[TYPED] = typed
            return self._templar.copy_with_new_env(available_variables=variables).template(value)

        # Rendering errors are judged there and named in words (never Jinja's text: it may hold a secret).
        findings, values = validate_templated(raw, render, specs.options, specs.internal,
                                              task_vars.get("group_names", ()), set(task_vars), workstation_config,
                                              task_vars.get("groups", {}).get("llm_routers", []), hub_config.read)
        result.update(changed=False, findings=findings, errors=len([f for f in findings if f["severity"] == "error"]),
                      settings=values, display=display(values, specs.options))
        return result
