# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
name: workdir
short_description: A path under the folder ansible-playbook was started in
version_added: "0.1.0"
description:
  - Joins each term to the workstation's current working directory, the folder the user ran
    ansible-playbook in. Ansible resolves relative paths in tasks against the playbook's folder; reports and
    saved logs belong where the user is.
options:
  _terms:
    description: Relative paths; absolute ones are returned as they are.
    required: true
author:
  - gpuserve.llm contributors (@gpuserve)
"""

EXAMPLES = r"""
- name: Where the fleet report goes
  ansible.builtin.debug:
    msg: "{{ lookup('gpuserve.llm.workdir', 'reports') }}"
"""

RETURN = r"""
_raw:
  description: Absolute paths on the workstation.
  type: list
  elements: path
"""

import os

from ansible.plugins.lookup import LookupBase


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        return [os.path.join(os.getcwd(), os.path.expanduser(str(t))) for t in terms]
