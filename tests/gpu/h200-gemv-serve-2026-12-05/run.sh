#!/usr/bin/env bash
# The device calls of 2026-12-05, second session (nvidia-h200, issue 37 item 3): the served start that
# ../h200-gemv-tune-2026-12-05/ had no time for. vLLM 0.26.0 with patches/vllm/0004-splitk-gemv-one-token.patch as
# landed, the engine part (DeepGEMM's JIT headers, flashinfer 0.6.14), VLLM_DEEP_GEMM_WARMUP=skip; the full
# GLM-4.6V-FP8 text shape (46 layers + MTP layer, random weights, the recipe's command as templates/vllm.j2 renders it,
# MTP off, without the 60 GiB KV cap), greedy prose. The tuned table is the one that run wrote
# (../h200-gemv-tune-2026-12-05/gemv.json, carried with the checkout), named by GPUSERVE_GEMV_CONFIGS as the service
# stage names the autotune stage's table.
# On the workstation (.whl/ is ignored), the parts made by `tests/gpu/carry.sh vllm engine`:
#   .whl/s1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/s2: vllm/ {vllm-part-01}
#   .whl/s3: vllm/ {vllm-part-02}
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h200):
#   s1: CALL=s1 bash tests/gpu/h200-gemv-serve-2026-12-05/run.sh stash .whl/s1       carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h200-gemv-serve-2026-12-05/run.sh stash .whl/s2       carry [".whl/s2"]
#   s3: CALL=s3 LEASE_LEFT=S bash tests/gpu/h200-gemv-serve-2026-12-05/run.sh start .whl/s3   carry [".whl/s3"]
#   s4...: CALL=sN bash tests/gpu/h200-gemv-serve-2026-12-05/run.sh wait .      follow on (CALL_S: the call's seconds)
#   last:  CALL=sN bash tests/gpu/h200-gemv-serve-2026-12-05/run.sh collect .   stop what is left, bring back all,
#          and the JIT caches packed for a later run (jit_cache_pack, at most 58 MiB)
# The driver (everything in /root/work; the bench: bench_recipe_vs_defaults.py recipe-no-mtp, NAME=<step>, LAYERS=46
# KINDS=prose REPEATS=5 SIDE='' PREFILL='' REUSE=0 TEMPERATURES=0 DROP=--kv-cache-memory-bytes, each server stopped):
#   1. patch 0004 applied with the image stage's applier (apply_series.py)
#   2. bench tuned-1 at 1, 16 and 40 requests (GPUSERVE_GEMV_CONFIGS=the tuned table; the first start compiles the
#      JIT caches, ~470 s on a fresh machine)
#   3. at one request, as the deadline allows: builtin-1 (no table: the patch's built-in configs), tuned-2, builtin-2
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
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
export PATH=$CUDA_HOME/bin:$PATH
SITE=$VLLM_DEST/site
TARGET=vllm/model_executor/kernels/linear/scaled_mm/flashinfer.py
# The patch as landed (patches/vllm), applied alone: it is the one of the series on this file.
PATCH_DIR=${PATCH_DIR:-$HERE/../../../patches/vllm}
PATCH=${PATCH:-0004-splitk-gemv-one-token.patch}

bench() {  # NAME NEED LIMIT: one server start of bench mode recipe-no-mtp, its rows, the server stopped
  local name=$1 need=$2 limit=$3
  echo "== $name: $TARGET sha256 $(sha256sum "$SITE/$TARGET" | cut -c1-16); GPUSERVE_GEMV_CONFIGS=${GPUSERVE_GEMV_CONFIGS:-}"
  step "$name" "$need" "$limit" env NAME="$name" BUDGET_S=$(( limit - 50 )) LAYERS=46 KINDS=prose \
    CONCURRENCY="${CONC:-1,16,40}" REPEATS=5 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=$(( limit - 90 )) \
    DROP=--kv-cache-memory-bytes TEMPERATURES=0 \
    python3 /root/repo/tests/gpu/bench_recipe_vs_defaults.py "$WORK/out" recipe-no-mtp "$SITE" || return 1
  grep -h "Selected .* for Fp8LinearMethod\|gpuserve.llm\|Graph capturing finished\|init engine\|KV cache\|Traceback\|Error" \
    "$WORK/out/vllm-$name.log" 2>/dev/null | cut -c1-400 | awk '!seen[$0]++' | tail -40
}

patch_on() {  # the image stage's applier on the unpacked bundle
  (cd /root && PYTHONPATH=$SITE python3 /root/repo/roles/image/files/apply_series.py --package vllm --version 0.26.0 \
    --dir "$PATCH_DIR" "$PATCH") > "$WORK/out/apply-series-$1.log" 2>&1
  echo "== $(date -u +%T) apply_series rc=$? ($(tr '\n' ' ' < "$WORK/out/apply-series-$1.log" | cut -c1-300));" \
    "$TARGET sha256 $(sha256sum "$SITE/$TARGET" | cut -c1-16)"
}

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline"
  TABLE=/root/repo/tests/gpu/h200-gemv-tune-2026-12-05/gemv.json
  echo "== the tuned table: $TABLE sha256 $(sha256sum "$TABLE" | cut -c1-16)"
  patch_on 1
  GPUSERVE_GEMV_CONFIGS=$TABLE CONC=${SERVE_CONC:-1,16,40} bench tuned-1 300 "${FIRST_LIMIT:-780}"
  CONC=1 bench builtin-1 150 230
  GPUSERVE_GEMV_CONFIGS=$TABLE CONC=1 bench tuned-2 150 230
  CONC=1 bench builtin-2 150 230
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

if [[ $MODE == collect ]]; then  # the JIT caches for a later run, beside the results
  jit_cache_pack "$OUT/jit-cache" 40 || true
fi
run_mode
