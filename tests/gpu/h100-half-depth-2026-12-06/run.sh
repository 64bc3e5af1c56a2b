#!/usr/bin/env bash
# The device calls of 2026-12-06 (nvidia-h100-x1, issue 37 items 2 and 4): no H200 was lent for five sessions, so
# the questions ../h200-triton-final-2026-12-05/ keeps open are asked of an H100 at the depth that fits it.
# GLM-4.6V-FP8's text shape at 24 of its 46 layers (~2.34 GB of FP8 weights a layer: 46 do not fit 80 GB; 24 take
# ~59 GB with the embeddings), random weights, the recipe's command as templates/vllm.j2 renders it, MTP off,
# without the 60 GiB KV cap; vLLM 0.26.0 with patches/vllm/0004-splitk-gemv-one-token.patch as landed and the
# engine part (DeepGEMM's JIT headers, flashinfer 0.6.14); greedy prose, 5 timed passes a row.
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h100-x1); .whl/ as in
# ../h200-triton-final-2026-12-05/run.sh (tests/gpu/carry.sh vllm engine):
#   s1: CALL=s1 bash tests/gpu/h100-half-depth-2026-12-06/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h100-half-depth-2026-12-06/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: SPARE_S=60 CALL=s3 LEASE_LEFT=S CALL_S=580 bash ... start .whl/s4             carry [".whl/s4"]
#   s4...: CALL=sN CALL_S=580 bash tests/gpu/h100-half-depth-2026-12-06/run.sh wait .
#   last:  CALL=sN bash tests/gpu/h100-half-depth-2026-12-06/run.sh collect .
# The driver (everything in /root/work), each bench a server start of bench_recipe_vs_defaults.py recipe-no-mtp:
#   1. patch 0004 applied with the image stage's applier (apply_series.py)
#   2. triton-attn at 1, 16, 40 (--attention-backend TRITON_ATTN): the first start, which compiles (820 s allowed
#      where no JIT caches were carried)
#   3. flash-attn at 1, 16, 40 (vLLM's choice, FLASH_ATTN) on the same lease
#   4. profile-triton: profile_step.py's graphs phase of the TRITON_ATTN command, greedy, trace kept
#   5. triton-attn-2 at 1, 16, 40, as the deadline allows
# A second lease (PLAN=second on the start call, the first lease's JIT caches carried in .whl/s4/jit-cache):
#   flash-attn-2, then triton-attn-3, at 1, 16, 40.
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_lib.sh"
device_args "$@"  # MODE, C, SELF, HERE, REPO, TAG, T0, WORK
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; bench and patch_on are the library's
export LAYERS=24  # bench's and profile_step.py's depth

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; LAYERS=$LAYERS;" \
    "$(python3 -c 'import triton; print("triton", triton.__version__)')"
  TRITON='["--attention-backend", "TRITON_ATTN"]'
  patch_on 1
  # Without the JIT caches (a checkout whose .whl/ was made afresh) the first start compiles for ~470-560 s.
  FIRST_LIMIT=420
  [[ -d $C/jit-cache ]] || FIRST_LIMIT=820
  if [[ ${PLAN:-first} == second ]]; then  # the second lease: each backend once more, FLASH_ATTN first
    CONC=1,16,40 bench flash-attn-2 150 "$FIRST_LIMIT"
    ADD=$TRITON CONC=1,16,40 bench triton-attn-3 150 420
  else
    ADD=$TRITON CONC=1,16,40 bench triton-attn 300 "$FIRST_LIMIT"
    CONC=1,16,40 bench flash-attn 200 420
    step profile-triton 240 420 env ADD="$TRITON" PHASES=graphs SAMPLING=greedy KEEP_TRACE=1 STEP_TOKENS=256 \
      WINDOW_S=0.5 HEALTH_TIMEOUT=340 python3 /root/repo/tests/gpu/profile_step.py "$WORK/out/profile" "$SITE"
    ADD=$TRITON CONC=1,16,40 bench triton-attn-2 200 420
  fi
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
