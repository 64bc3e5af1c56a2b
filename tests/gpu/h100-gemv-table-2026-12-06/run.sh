#!/usr/bin/env bash
# The device calls of 2026-12-06, second session (nvidia-h100-x1, issue 37 item 3): does the autotune stage's GEMV
# table pay served on a GPU other than the one patch 0004's built-in configs were measured on (an H200)? No H200 was
# lent (two refused starts this session, six sessions in a row), an H100 is: the table tune_gemv.py makes on it, under
# the keeps_built_in rule, served against the built-in configs, alternating starts on one lease.
# GLM-4.6V-FP8's text shape at 24 of its 46 layers (the 46 do not fit 80 GB), random weights, the recipe's command as
# templates/vllm.j2 renders it, MTP off, vLLM's own attention choice (FLASH_ATTN), without the 60 GiB KV cap; vLLM
# 0.26.0 with patches/vllm/0004-splitk-gemv-one-token.patch as landed and the engine part; greedy prose, one request,
# 5 timed passes a start (the GEMV runs at one token only: 16 and 40 requests do not reach it).
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h100-x1); .whl/ as in
# ../h200-triton-final-2026-12-05/run.sh (tests/gpu/carry.sh vllm engine; .whl/s4/jit-cache from the H100 lease of
# ../h100-half-depth-2026-12-06/):
#   s1: CALL=s1 bash tests/gpu/h100-gemv-table-2026-12-06/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h100-gemv-table-2026-12-06/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: SPARE_S=60 CALL=s3 LEASE_LEFT=S CALL_S=580 bash ... start .whl/s4             carry [".whl/s4"]
#   s4...: CALL=sN CALL_S=580 bash tests/gpu/h100-gemv-table-2026-12-06/run.sh wait .
#   last:  CALL=sN bash tests/gpu/h100-gemv-table-2026-12-06/run.sh collect .
# The driver (everything in /root/work):
#   1. patch 0004 applied with the image stage's applier (apply_series.py)
#   2. tune_gemv.py as the autotune stage runs it, on the four one-GPU shapes (calls a step at this depth: qkv and
#      o_proj 24, the shared expert's two 23; layer 0 is dense)
#   3. builtin-1, tuned-1, builtin-2, tuned-2, then builtin-3, tuned-3 as the deadline allows: one server start each
#      of bench_recipe_vs_defaults.py recipe-no-mtp at one request, GPUSERVE_GEMV_CONFIGS set for the tuned starts
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_lib.sh"
device_args "$@"  # MODE, C, SELF, HERE, REPO, TAG, T0, WORK
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; bench and patch_on are the library's
export LAYERS=24  # bench's depth

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; LAYERS=$LAYERS;" \
    "$(python3 -c 'import triton; print("triton", triton.__version__)')"
  TUNER=/root/repo/roles/autotune/files/tune_gemv.py
  TABLE=$WORK/out/gemv.json
  patch_on 1
  FIRST_LIMIT=300
  [[ -d $C/jit-cache ]] || FIRST_LIMIT=820
  step tune-tp1 150 360 env PYTHONPATH="$SITE" python3 "$TUNER" --out "$TABLE" --shape 14336x4096:24 \
    --shape 4096x12288:24 --shape 2816x4096:23 --shape 4096x1408:23
  [[ -f $TABLE ]] || { echo "== no table: nothing to serve"; exit 0; }
  CONC=1 bench builtin-1 130 "$FIRST_LIMIT"
  GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-1 130 240
  CONC=1 bench builtin-2 130 240
  GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-2 130 240
  CONC=1 bench builtin-3 130 240
  GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-3 130 240
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
