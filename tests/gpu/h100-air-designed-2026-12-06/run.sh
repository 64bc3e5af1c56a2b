#!/usr/bin/env bash
# Issue 37 item 8 on an H100 (nvidia-h100-x1, 2026-12-06: no H200 lent, four refused starts that session): the
# block-FP8 hand-set weights dummy_hf_weights.py now writes, proven on vLLM before the full-depth H200 run
# (../h200-air-designed-2026-12-06/run.sh): GLM-4.5-Air's text shape at 24 of its 46 layers + the MTP layer (~55 GiB
# in FP8; the 46 do not fit 80 GB), its MTP layer agreeing with its model on 80 % and 60 % of one-token drafts,
# served by the tuned command (the recipe as templates/vllm.j2 renders it, patches/vllm/0004 applied by the image
# stage's applier) with llm_drafter mtp, and with it off; one request, greedy prose of 256 tokens, 5 timed passes.
# Does vLLM load the FP8 checkpoint, accept the drafts the weights were designed to give, and what is a drafted step?
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h100-x1); .whl/ as in
# ../h200-triton-final-2026-12-05/run.sh (tests/gpu/carry.sh vllm engine):
#   s1: CALL=s1 bash tests/gpu/h100-air-designed-2026-12-06/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h100-air-designed-2026-12-06/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: SPARE_S=50 CALL=s3 LEASE_LEFT=S CALL_S=580 bash ... start .whl/s4             carry [".whl/s4"]
#   s4...: CALL=sN CALL_S=580 bash tests/gpu/h100-air-designed-2026-12-06/run.sh wait .
#   last:  CALL=sN bash tests/gpu/h100-air-designed-2026-12-06/run.sh collect .
# The driver (everything in /root/work): patch 0004 applied; then mtp_fraction.py's arms mtp:0.8, off:0.8 (the MTP
# layer not loaded: the same weights undrafted), mtp:0.6, each a server start of its own with the folder written
# afresh at that agreement, as the deadline allows.
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_lib.sh"
device_args "$@"  # MODE, C, SELF, HERE, REPO, TAG, T0, WORK
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; patch_on is the library's

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; $(df -h /root | tail -1)"
  patch_on 1
  LIMIT=$(until_deadline)
  step air-designed 240 "$LIMIT" env DESIGNED_LAYERS=24 DESIGNED_FP8=1 DROP=--kv-cache-memory-bytes CONCURRENCY=1 \
    KINDS=prose REPEATS=5 BUDGET_S=$(( LIMIT - 45 )) ARM_MIN_S=150 \
    python3 /root/repo/tests/gpu/mtp_fraction.py "$WORK/out" mtp:0.8,off:0.8,mtp:0.6 "$SITE"
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
