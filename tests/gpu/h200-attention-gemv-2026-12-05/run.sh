#!/usr/bin/env bash
# The device calls of 2026-12-05, third session (nvidia-h200, issue 37 items 2 and 3): the attention backends vLLM
# 0.26.0 lists for this shape beside FA3 (attention is 0.90 ms of a 6.7 ms step at one request, ~720 kernels of
# 1-10 us, never measured against the others), and the GEMV table tuned again under tune_gemv.py's new rule (a config
# kept where its slowest repeat beats vLLM's fastest) served against the patch's built-in configs.
# vLLM 0.26.0 with patches/vllm/0004-splitk-gemv-one-token.patch as landed, the engine part (DeepGEMM's JIT headers,
# flashinfer 0.6.14), VLLM_DEEP_GEMM_WARMUP=skip, the JIT caches of ../h200-gemv-serve-2026-12-05/ laid down first;
# the full GLM-4.6V-FP8 text shape (46 layers + MTP layer, random weights, the recipe's command as templates/vllm.j2
# renders it, MTP off, without the 60 GiB KV cap), greedy prose, 5 timed passes a row.
# On the workstation (.whl/ is ignored), the parts made by `tests/gpu/carry.sh vllm engine`:
#   .whl/s1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/s2: vllm/ {vllm-part-01}
#   .whl/s3: vllm/ {vllm-part-02}, jit-cache/ (a copy of .whl/jit-cache: jit_cache_pack's parts)
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h200):
#   s1: CALL=s1 bash tests/gpu/h200-attention-gemv-2026-12-05/run.sh stash .whl/s1      carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h200-attention-gemv-2026-12-05/run.sh stash .whl/s2      carry [".whl/s2"]
#   s3: CALL=s3 LEASE_LEFT=S bash tests/gpu/h200-attention-gemv-2026-12-05/run.sh start .whl/s3  carry [".whl/s3"]
#   s4...: CALL=sN bash tests/gpu/h200-attention-gemv-2026-12-05/run.sh wait .     follow on (CALL_S: the call's seconds)
#   last:  CALL=sN bash tests/gpu/h200-attention-gemv-2026-12-05/run.sh collect .  stop what is left, bring back all
# The driver (everything in /root/work), each bench a server start of bench_recipe_vs_defaults.py recipe-no-mtp
# (LAYERS=46 KINDS=prose REPEATS=5 SIDE='' PREFILL='' REUSE=0 TEMPERATURES=0 DROP=--kv-cache-memory-bytes):
#   1. patch 0004 applied with the image stage's applier (apply_series.py)
#   2. builtin-1 at 1, 16, 40 (no table: the patch's built-in configs; FLASH_ATTN, vLLM's choice)
#   3. triton-attn, flashinfer-attn at 1, 16, 40 (ADD: --attention-backend TRITON_ATTN / FLASHINFER)
#   4. tune_gemv.py on the four one-GPU shapes (autotune_plan's gemv list for GLM-4.6V-FP8 at tensor parallel 1),
#      then tuned-1 at 1 (GPUSERVE_GEMV_CONFIGS = that table)
#   5. builtin-2, tuned-2 at 1; then the tuner on the shapes at 2 and 4 GPUs a GPU, as the deadline allows
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
set -uo pipefail
MODE=${1:?usage: run.sh stash|start|wait|collect|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
REPO=$(cd "$HERE/../../.." && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=${WORK:-/root/work}
# shellcheck source=tests/gpu/device_lib.sh
source "$HERE/../device_lib.sh"
engine_env  # SITE, TARGET, PATCH_DIR, PATCH; bench and patch_on are the library's

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; $(python3 -c 'import triton; print("triton", triton.__version__)')"
  TUNER=/root/repo/roles/autotune/files/tune_gemv.py
  TABLE=$WORK/out/gemv.json
  patch_on 1
  CONC=1,16,40 bench builtin-1 200 420
  ADD='["--attention-backend", "TRITON_ATTN"]' CONC=1,16,40 bench triton-attn 200 420
  ADD='["--attention-backend", "FLASHINFER"]' CONC=1,16,40 bench flashinfer-attn 200 480
  step tune-tp1 120 300 env PYTHONPATH="$SITE" python3 "$TUNER" --out "$TABLE" --shape 14336x4096:46 \
    --shape 4096x12288:46 --shape 2816x4096:45 --shape 4096x1408:45
  [[ -f $TABLE ]] && GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-1 150 230
  CONC=1 bench builtin-2 150 230
  [[ -f $TABLE ]] && GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-2 150 230
  step tune-tp2-tp4 60 200 env PYTHONPATH="$SITE" python3 "$TUNER" --out "$WORK/out/gemv-tp2-tp4.json" \
    --shape 7168x4096:46 --shape 4096x6144:46 --shape 1408x4096:45 --shape 3584x4096:46 --shape 4096x3072:46 \
    --shape 704x4096:45
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
