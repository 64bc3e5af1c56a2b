#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: validate_settings
short_description: Validate every setting (the llm_ ones and every role's knobs) before anything changes
version_added: "0.1.0"
description:
  - Checks every setting in scope (the llm_ ones and every role's knobs, read by the roles' prefixes) against the
    roles' argument specs (types, choices), then ranges,
    cross-field rules (llm_max_tokens within llm_context, llm_context within llm_model_max_context, unique GPU
    indices, a well-formed port and bind address, a URL's port a number from 1 to 65535) and what the chosen engine
    can honour.
  - What the model's shape allows, before anything changes - vLLM and SGLang split the model over every GPU of
    C(llm_gpus), so a count its attention heads, KV heads, MLP or experts' widths (or, with C(llm_vision), its
    vision tower's heads) do not divide is E_UNSUPPORTED, as is C(llm_vision) for a model with no vision tower. The
    shape is the burn-in folder's config, a hub model's config.json in the workstation's Hugging Face cache, or the
    shape the collection carries for the recipe's model; another hub model on several GPUs is W_CHECK_SKIPPED.
  - Each failure is a finding - E_CONFIG, E_CONTEXT or E_UNSUPPORTED - naming the variable, the value and what
    is allowed; a variable with a setting's prefix that the collection does not know is W_UNKNOWN_SETTING, a check
    the model's unknown shape leaves unmade W_CHECK_SKIPPED.
  - One finding per mistake, in words. A setting computed from one that was refused (C(llm_context) from
    C(llm_model_max_context), C(preflight_image_cuda) from C(llm_engine)) is neither reported nor handed on, and
    a rule across settings reads only those that passed. The settings whose templates read C(llm_settings) are
    rendered with the values validated first. A template that cannot be computed is named with what it reads
    that is not set, never with the template error's text.
  - Runs on the controller (an action plugin); needs nothing from the host and changes nothing. Secret values
    (options with no_log) are never shown.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only.
  diff_mode:
    support: none
  action:
    description: Runs on the controller as an action plugin; nothing is sent to the host.
    support: full
options:
  settings:
    description: Every llm_ variable in scope, by name, with its templated value.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Validate the settings
  gpuserve.llm.validate_settings:
    settings: "{{ dict(names | zip(query('ansible.builtin.vars', *names))) }}"
  vars:
    names: "{{ query('ansible.builtin.varnames', '^llm_') }}"
"""

RETURN = r"""
findings:
  description: One entry per problem, with code, severity, subject (the variable), message and fix.
  returned: always
  type: list
  elements: dict
errors:
  description: How many findings are errors.
  returned: always
  type: int
"""
