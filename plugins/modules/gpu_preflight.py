#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: gpu_preflight
short_description: Read the host's NVIDIA GPUs through NVML and report findings with codes
version_added: "0.1.0"
description:
  - Reads every GPU through NVML (the C{pynvml} module of nvidia-ml-py) and checks the GPUs named in
    O(gpus) against what the engine profile needs - GPU count, compute capability, the driver's CUDA
    against the image's, MIG mode, ECC errors, retired pages and pending row remaps, free memory, other
    processes, peer access on every ordered pair, the enforced power limit, and PCIe link generation
    and width.
  - Tells a host without an NVIDIA driver (E_NO_DRIVER, naming the distribution's package) from one whose driver
    does not answer (E_NVML). The driver is read, never installed.
  - Returns findings as data (code, severity, subject, message, fix) and the GPUs and the pair matrix as
    facts. It never fails on a finding; the calling role decides what stops a host.
  - Read-only. Never changes a GPU setting (power, clocks, MIG, persistence).
  - Every NVML call is guarded; a call NVML or the installed binding cannot answer is recorded in
    RV(nvml_unanswered) and never becomes a traceback.
author:
  - gpuserve.llm contributors (@gpuserve)
requirements:
  - nvidia-ml-py on the interpreter that runs the module (the host_venv role installs it)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
options:
  gpus:
    description: NVML indices of the GPUs the engine will use (the indices C(docker --gpus) takes).
    type: list
    elements: int
    required: true
  min_free_mib:
    description: Free memory each selected GPU must have, in MiB.
    type: int
    default: 90000
  expected_power_w:
    description: The enforced power limit the recipe was measured at, in watts; V(0) skips the comparison.
    type: float
    default: 0
  min_compute_capability:
    description: The lowest compute capability the engine supports.
    type: str
    default: "8.9"
  min_cuda_version:
    description: The CUDA version of the engine image (for example V(12.8)); the driver must support it. Empty skips the check.
    type: str
    default: ""
  max_ecc_uncorrected:
    description: Uncorrected volatile ECC errors tolerated on a GPU.
    type: int
    default: 0
  max_retired_pages:
    description: Retired pages (single and double bit) tolerated on a GPU.
    type: int
    default: 0
  own_container_ids:
    description:
      - Container ids of this collection's own engine. Their processes and the memory they hold do not count
        as busy or used, so that a rerun on a serving host passes.
    type: list
    elements: str
    default: []
  dev_root:
    description:
      - Where the device files are read (tests point it at a folder). Without C(nvidiactl) there and without a
        loadable libnvidia-ml the host has no driver at all - E_NO_DRIVER, naming the distribution's driver
        package (from C(/etc/os-release)); a driver that is there but does not answer is E_NVML.
    type: path
    default: /dev
"""

EXAMPLES = r"""
- name: Check the four GPUs of the recipe
  gpuserve.llm.gpu_preflight:
    gpus: [0, 1, 2, 3]
    min_free_mib: 90000
    expected_power_w: 250
    min_cuda_version: "12.8"
  register: gpu_check
  vars:
    ansible_python_interpreter: /opt/gpuserve/venv/bin/python
"""

RETURN = r"""
findings:
  description: One entry per problem found, with code, severity, subject, message, fix and details.
  returned: always
  type: list
  elements: dict
  sample:
    - code: W_POWER
      severity: warning
      subject: GPU 0
      message: GPU 0 (NVIDIA H200, 00000000:00:06.0) enforces a 700 W power limit, not the expected 250 W; it is not changed
      fix: Results may differ from the recipe's; set the limit yourself if you mean to, or set preflight_expected_power_w.
gpus:
  description:
    - Every GPU the driver sees, with memory in MiB, power in W, PCIe link, ECC, MIG and processes.
    - C(unanswered) maps each reading NVML did not give to its error; a check that needs one is not made on that
      GPU and says so (W_CHECK_SKIPPED, naming the check, the GPUs and NVML's answer).
  returned: when NVML initialised
  type: list
  elements: dict
p2p:
  description: Every ordered pair of selected GPUs with each peer-access capability's NVML status and a verdict.
  returned: when NVML initialised
  type: list
  elements: dict
driver_version:
  description: The NVIDIA driver version.
  returned: when NVML initialised
  type: str
cuda_driver_version:
  description: The highest CUDA version the driver supports.
  returned: when NVML initialised
  type: str
nvml_unanswered:
  description: NVML calls that raised or are missing from the installed binding, with the error.
  returned: always
  type: list
  elements: dict
elapsed_s:
  description: Seconds the NVML reading took.
  returned: always
  type: float
"""

import sys
import time

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.gpuserve.llm.plugins.module_utils.codes import finding
from ansible_collections.gpuserve.llm.plugins.module_utils.nvml_checks import os_release, run_checks

try:
    import pynvml
    PYNVML_ERROR = None
except Exception as e:  # ImportError, or a broken install
    pynvml = None
    PYNVML_ERROR = e


def main():
    module = AnsibleModule(
        argument_spec=dict(
            gpus=dict(type="list", elements="int", required=True),
            min_free_mib=dict(type="int", default=90000),
            expected_power_w=dict(type="float", default=0),
            min_compute_capability=dict(type="str", default="8.9"),
            min_cuda_version=dict(type="str", default=""),
            max_ecc_uncorrected=dict(type="int", default=0),
            max_retired_pages=dict(type="int", default=0),
            own_container_ids=dict(type="list", elements="str", default=[]),
            dev_root=dict(type="path", default="/dev"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    started = time.monotonic()
    if pynvml is None:
        msg = missing_required_lib("nvidia-ml-py")
        module.exit_json(changed=False, findings=[finding(
            "E_NVML", "nvidia-ml-py", "%s (interpreter %s): %s" % (msg, sys.executable, PYNVML_ERROR))],
            nvml_unanswered=[], elapsed_s=round(time.monotonic() - started, 3))

    facts, findings = run_checks(
        pynvml, p["gpus"], p["min_free_mib"], p["expected_power_w"],
        min_compute_capability=p["min_compute_capability"],
        min_cuda_version=p["min_cuda_version"] or None,
        max_ecc_uncorrected=p["max_ecc_uncorrected"],
        max_retired_pages=p["max_retired_pages"],
        own_container_ids=p["own_container_ids"],
        dev_root=p["dev_root"],
        release=os_release(),
    )
    module.exit_json(changed=False, findings=findings, elapsed_s=round(time.monotonic() - started, 3), **facts)


if __name__ == "__main__":
    main()
