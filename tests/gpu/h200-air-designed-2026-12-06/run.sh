#!/usr/bin/env bash
# Issue 37 item 8 (nvidia-h200; written 2026-12-06, not run that day: no H200 was lent): GLM-4.5-Air's text shape at
# full depth (46 layers + the MTP layer) with dummy_hf_weights' hand-set weights in block FP8 (105.4 GiB: bf16, 205.8
# GiB, fits no GPU), its MTP layer agreeing with its model on 60 % and 80 % of one-token drafts, served by the tuned
# command (the recipe as templates/vllm.j2 renders it, patches/vllm/0004 applied by the image stage's applier) with
# llm_drafter mtp, and with it off; one request, greedy prose of 256 tokens, 5 timed passes an arm. Does one request
# beat the seed's 264 tok/s, and at what agreement would it?
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h200, needs_h200: the full
# shape does not fit 80 GB); .whl/ as in ../h200-triton-final-2026-12-05/run.sh (tests/gpu/carry.sh vllm engine):
#   s1: CALL=s1 bash tests/gpu/h200-air-designed-2026-12-06/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h200-air-designed-2026-12-06/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: SPARE_S=60 CALL=s3 LEASE_LEFT=S CALL_S=580 bash ... start .whl/s4             carry [".whl/s4"]
#   s4...: CALL=sN CALL_S=580 bash tests/gpu/h200-air-designed-2026-12-06/run.sh wait .
#   last:  CALL=sN bash tests/gpu/h200-air-designed-2026-12-06/run.sh collect .
# The driver (everything in /root/work): patch 0004 applied; then mtp_fraction.py's arms off:0.6 (the MTP layer not
# loaded: the step without drafting on the same weights), mtp:0.8, mtp:0.6, each a server start of its own with the
# folder written afresh at that agreement (3.3 s on the workstation), as the deadline allows.
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_lib.sh"
device_args "$@"  # MODE, C, SELF, HERE, REPO, TAG, T0, WORK
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; patch_on and designed_mtp are the library's

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; $(df -h /root | tail -1)"
  patch_on 1
  designed_mtp air-designed 300 "$(until_deadline)" 0 off:0.6,mtp:0.8,mtp:0.6
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi
run_mode
