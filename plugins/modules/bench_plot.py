#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuserve.llm contributors
# Apache License 2.0 (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: bench_plot
short_description: Draw a bench result's throughput and time-to-first-token plots as PNG
version_added: "0.1.0"
description:
  - Runs on the workstation (matplotlib, from the collection's requirements.txt). Two plots against the number of
    concurrent requests, one line per endpoint and prompt kind - aggregate and per-request tok/s
    (C(throughput.png)), and the median time to the first token (C(ttft.png)); where the rows were measured more
    than once, each point is the median with a bar to the lowest and highest pass.
author:
  - gpuserve.llm contributors (@gpuserve)
extends_documentation_fragment:
  - gpuserve.llm.attributes
attributes:
  check_mode:
    support: none
    details: Writes the files.
  diff_mode:
    support: none
requirements:
  - matplotlib
options:
  result:
    description: The bench result (as M(gpuserve.llm.bench_run) returns it, its C(endpoints) list).
    type: dict
    required: true
  dest:
    description: The folder to write the PNG files into.
    type: path
    required: true
"""

EXAMPLES = r"""
- name: Draw the plots
  gpuserve.llm.bench_plot:
    result: "{{ bench_result }}"
    dest: reports/gpu1
  delegate_to: localhost
"""

RETURN = r"""
files:
  description: The files written.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot
    HAS_MATPLOTLIB = True
except ImportError:
    HAS_MATPLOTLIB = False


def series(result, field):
    """(label, x, y, yerr) per endpoint and prompt kind, for a decode row field; yerr is the distance from each
    median down and up to the passes' lowest and highest (None where the rows have no range)."""
    out = []
    for ep in result["endpoints"]:
        kinds = []
        for row in ep["decode"]:
            if row["kind"] not in kinds:
                kinds.append(row["kind"])
        for kind in kinds:
            rows = [r for r in ep["decode"] if r["kind"] == kind and r.get(field) is not None]
            label = kind if len(result["endpoints"]) == 1 else "%s, %s" % (ep["name"], kind)
            spans = [(r.get("range") or {}).get(field) for r in rows]
            yerr = None
            if rows and all(spans):
                yerr = [[r[field] - s[0] for r, s in zip(rows, spans)], [s[1] - r[field] for r, s in zip(rows, spans)]]
            out.append((label, [r["requests"] for r in rows], [r[field] for r in rows], yerr))
    return out


def curves(ax, result, field, ylabel):
    """One line per endpoint and kind against the concurrency, on a log-2 axis."""
    ticks = set()
    for label, x, y, yerr in series(result, field):
        ax.errorbar(x, y, yerr=yerr, marker="o", capsize=3, label=label)
        ticks.update(x)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(ticks))
    ax.set_xticklabels([str(t) for t in sorted(ticks)])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)


def draw(result, dest):
    title = "%s, %s%s" % (result.get("host", ""), result.get("model", ""), " (dummy weights)" if result.get("dummy") else "")
    files = [os.path.join(dest, "throughput.png"), os.path.join(dest, "ttft.png")]
    fig, axes = pyplot.subplots(1, 2, figsize=(11, 4.2))
    curves(axes[0], result, "aggregate_tok_s", "aggregate tok/s")
    curves(axes[1], result, "per_request_tok_s", "per-request tok/s (median)")
    fig.suptitle("Decode throughput: " + title, fontsize=10)
    fig.tight_layout()
    fig.savefig(files[0], dpi=110)
    pyplot.close(fig)

    fig, ax = pyplot.subplots(figsize=(6, 4.2))
    curves(ax, result, "ttft_ms", "time to first token, ms (median)")
    ax.set_title("TTFT: " + title, fontsize=10)
    fig.tight_layout()
    fig.savefig(files[1], dpi=110)
    pyplot.close(fig)
    return files


def main():
    module = AnsibleModule(argument_spec=dict(result=dict(type="dict", required=True),
                                              dest=dict(type="path", required=True)),
                           supports_check_mode=False)
    if not HAS_MATPLOTLIB:
        module.fail_json(msg=missing_required_lib("matplotlib") + " (on the workstation: pip install -r requirements.txt)")
    if not os.path.isdir(module.params["dest"]):
        os.makedirs(module.params["dest"])
    module.exit_json(changed=True, files=draw(module.params["result"], module.params["dest"]))


if __name__ == "__main__":
    main()
