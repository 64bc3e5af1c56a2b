# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """How the modules that send requests to a front verify its HTTPS (llm_tls)."""

    DOCUMENTATION = r"""
options:
  tls_ca_file:
    description: >-
      A CA certificate (PEM, on the host) that HTTPS endpoints are verified with (the collection's CA, with
      C(llm_tls)); empty - the system's trust store.
    type: path
    default: ""
  tls_verify:
    description: Verify HTTPS endpoints' certificates (off for a given certificate that does not name loopback).
    type: bool
    default: true
"""
