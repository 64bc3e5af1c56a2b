#!/usr/bin/env bash
# The device calls of 2026-12-05, fifth session (nvidia-h200, issue 37 items 2-4): TRITON_ATTN against FA3 on a second
# lease (the first, ../h200-attention-gemv-2026-12-05/, gave TRITON_ATTN +4.8 % at one request and -3.0 % at 16, one
# server start each), the profile of the best command so far (split-K GEMV + TRITON_ATTN) for item 4's table, and the
# GEMV table tuned under tune_gemv.py's keeps_built_in rule served with TRITON_ATTN.
# vLLM 0.26.0 with patches/vllm/0004-splitk-gemv-one-token.patch as landed, the engine part (DeepGEMM's JIT headers,
# flashinfer 0.6.14), VLLM_DEEP_GEMM_WARMUP=skip, the JIT caches the last run packed laid down first; the full
# GLM-4.6V-FP8 text shape (46 layers + MTP layer, random weights, the recipe's command as templates/vllm.j2 renders
# it, MTP off, without the 60 GiB KV cap), greedy prose, 5 timed passes a row.
# On the workstation (.whl/ is ignored), the parts made by `tests/gpu/carry.sh vllm engine`:
#   .whl/s1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/s2: vllm/ {vllm-part-01}
#   .whl/s4: vllm/ {vllm-part-02}, jit-cache/ (the last run's .whl/jit-cache-new: jit_cache_pack's parts; optional)
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h200):
#   s1: CALL=s1 bash tests/gpu/h200-triton-final-2026-12-05/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h200-triton-final-2026-12-05/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: SPARE_S=60 CALL=s3 LEASE_LEFT=S CALL_S=580 bash ... start .whl/s4             carry [".whl/s4"]
#   s4...: CALL=sN CALL_S=580 bash tests/gpu/h200-triton-final-2026-12-05/run.sh wait .
#   last:  CALL=sN bash tests/gpu/h200-triton-final-2026-12-05/run.sh collect .  stop what is left, bring back all
# The driver (everything in /root/work), each bench a server start of bench_recipe_vs_defaults.py recipe-no-mtp:
#   1. patch 0004 applied with the image stage's applier (apply_series.py)
#   2. profile-triton: profile_step.py's graphs phase of the TRITON_ATTN command, greedy, trace kept (item 4's table,
#      first since 2026-12-06: a lease of ~1,400 s holds a cold first start and one more); 820 s allowed where no
#      JIT caches were carried (the first start compiles)
#   3. triton-attn-2 at 1, 16, 40 (--attention-backend TRITON_ATTN; built-in GEMV configs)
#   4. flash-attn-2 at 1, 16, 40 (vLLM's choice, FLASH_ATTN: the baseline again on this lease)
#   5. tune_gemv.py on the four one-GPU shapes (keeps_built_in), then tuned-triton at 1 (TRITON_ATTN + that table)
#   6. triton-attn-3 at 1, 16, 40, as the deadline allows
# PLAN=air on the start call (2026-12-06 on): after the profile, issue 37 item 8 at full depth (mtp_fraction.py's
# arms off:0.6, mtp:0.8, mtp:0.6 on GLM-4.5-Air's block-FP8 hand-set weights, as ../h200-air-designed-2026-12-06/),
# then 3, 4 and 6; not 5 (on an H200 the tuner now writes the built-in configs, so the table is them).
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../device_lib.sh"
device_args "$@"  # MODE, C, SELF, HERE, REPO, TAG, T0, WORK
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; bench and patch_on are the library's

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; $(python3 -c 'import triton; print("triton", triton.__version__)')"
  TUNER=/root/repo/roles/autotune/files/tune_gemv.py
  TABLE=$WORK/out/gemv.json
  TRITON='["--attention-backend", "TRITON_ATTN"]'
  patch_on 1
  # Without the JIT caches (a checkout whose .whl/ was made afresh) the first start compiles for ~470-560 s.
  FIRST_LIMIT=480
  [[ -d $C/jit-cache ]] || FIRST_LIMIT=820
  step profile-triton 300 "$FIRST_LIMIT" env ADD="$TRITON" PHASES=graphs SAMPLING=greedy KEEP_TRACE=1 STEP_TOKENS=256 \
    WINDOW_S=0.5 HEALTH_TIMEOUT=$(( FIRST_LIMIT - 80 )) python3 /root/repo/tests/gpu/profile_step.py "$WORK/out/profile" \
    "$SITE"
  if [[ ${PLAN:-} == air ]]; then  # since 2026-12-06: item 8 at full depth second (../h200-air-designed-2026-12-06/)
    designed_mtp air-designed 560 620 0 off:0.6,mtp:0.8,mtp:0.6
  fi
  ADD=$TRITON CONC=1,16,40 bench triton-attn-2 200 420
  CONC=1,16,40 bench flash-attn-2 200 420
  if [[ ${PLAN:-} != air ]]; then  # the tuner now writes the built-in configs on an H200: the table is them
    step tune-tp1 120 300 env PYTHONPATH="$SITE" python3 "$TUNER" --out "$TABLE" --shape 14336x4096:46 \
      --shape 4096x12288:46 --shape 2816x4096:45 --shape 4096x1408:45
    [[ -f $TABLE ]] && ADD=$TRITON GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-triton 150 230
  fi
  ADD=$TRITON CONC=1,16,40 bench triton-attn-3 200 420
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
