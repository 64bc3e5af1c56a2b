#!/usr/bin/env bash
# The device calls of 2026-12-05 (nvidia-h200, issue 37 item 3): the one-token split-K GEMV's configs as a tuned
# artefact. vLLM 0.26.0 with patches/vllm/0004-splitk-gemv-one-token.patch as landed (it reads a tuned table named by
# GPUSERVE_GEMV_CONFIGS), roles/autotune/files/tune_gemv.py run on the H200 for GLM-4.6V-FP8's four block-FP8 linear
# shapes at tensor parallel 1 (and, apart, those at 2 and 4 GPUs a GPU, which the built-in table lacks), then one
# server start with the built-in configs and one with the tuned table, on the full GLM-4.6V-FP8 text shape (46 layers
# + MTP layer, random weights, the recipe's command as templates/vllm.j2 renders it, MTP off, without the 60 GiB KV
# cap), greedy prose at 1, 16 and 40 requests; then again at one request, as the deadline allows.
# vLLM 0.26.0 + the engine part (DeepGEMM's JIT headers, flashinfer 0.6.14), VLLM_DEEP_GEMM_WARMUP=skip, as
# ../h200-splitk-serve-2026-12-04/ (its run.sh is the model of this one), with the helpers in ../device_lib.sh.
# On the workstation (.whl/ is ignored), hard links of the parts made by `tests/gpu/carry.sh vllm engine` here:
#   .whl/s1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/s2: vllm/ {vllm-part-01}
#   .whl/s3: vllm/ {vllm-part-02}
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h200):
#   s1: CALL=s1 bash tests/gpu/h200-gemv-tune-2026-12-05/run.sh stash .whl/s1       carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h200-gemv-tune-2026-12-05/run.sh stash .whl/s2       carry [".whl/s2"]
#   s3: CALL=s3 LEASE_LEFT=S bash tests/gpu/h200-gemv-tune-2026-12-05/run.sh start .whl/s3   carry [".whl/s3"]
#       unpack vLLM + engine, copy the checkout to /root/repo, start the driver (below) in a session of its own and
#       follow it until the call's time is spent. LEASE_LEFT: the session's device seconds left as s3 starts; the
#       driver starts no step that would end later than LEASE_LEFT - SPARE_S (150) from then.
#   s4...: CALL=sN bash tests/gpu/h200-gemv-tune-2026-12-05/run.sh wait .      follow on (CALL_S: the call's seconds)
#   last:  CALL=sN bash tests/gpu/h200-gemv-tune-2026-12-05/run.sh collect .   stop what is left, bring back all
# The driver (everything in /root/work; the bench: bench_recipe_vs_defaults.py recipe-no-mtp, NAME=<step>, LAYERS=46
# KINDS=prose REPEATS=5 SIDE='' PREFILL='' REUSE=0 TEMPERATURES=0 DROP=--kv-cache-memory-bytes, each server stopped):
#   1. patch 0004 applied with the image stage's applier (apply_series.py)
#   2. tune_gemv.py for the four shapes of one GPU -> gemv.json (it times the built-in configs too)
#   3. bench tuned-1 (1, 16, 40 requests; GPUSERVE_GEMV_CONFIGS=gemv.json)
#   4. tune_gemv.py for the six shapes at 2 and 4 GPUs -> gemv-tp2-tp4.json
#   5. at one request, as the deadline allows: bench builtin-1 (no table), tuned-2, builtin-2
# No GPU setting is changed. Every vLLM server runs in a process group of its own (guarded), ended by its id.
# What ran on 2026-12-05 (report.md, "Calls"): s1 and s2 as above; s3 as
#   SERVE=0 SPARE_S=40 CALL=s3 LEASE_LEFT=340 CALL_S=320 bash tests/gpu/h200-gemv-tune-2026-12-05/run.sh start .whl/s3
# (the tuner for one GPU's shapes; the lease had no time for a served start). An earlier s3 with SERVE=1
# SERVE_CONC=1 SPARE_S=90 LEASE_LEFT=893 CALL_S=580 lost its machine during the call; nothing came back.
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
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; $(python3 -c 'import triton; print("triton", triton.__version__)')"
  TUNER=/root/repo/roles/autotune/files/tune_gemv.py
  patch_on 1
  # the tuner's lines go to this log; its table to gemv*.json
  step tune-tp1 120 400 env PYTHONPATH="$SITE" python3 "$TUNER" --out "$WORK/out/gemv.json" --shape 14336x4096:46 \
    --shape 4096x12288:46 --shape 2816x4096:45 --shape 4096x1408:45
  # the first start compiles the JIT caches (~400 s on a fresh machine, ../device_lib.sh), before its health
  # SERVE=0: the tuners alone (a short lease); SERVE_CONC: the rows of the first served start
  if [[ -f $WORK/out/gemv.json && ${SERVE:-1} == 1 ]]; then
    GPUSERVE_GEMV_CONFIGS=$WORK/out/gemv.json CONC=${SERVE_CONC:-1,16,40} bench tuned-1 300 720
  fi
  step tune-tp2-tp4 90 300 env PYTHONPATH="$SITE" python3 "$TUNER" --out "$WORK/out/gemv-tp2-tp4.json" \
    --shape 7168x4096:46 --shape 4096x6144:46 --shape 1408x4096:45 --shape 3584x4096:46 --shape 4096x3072:46 \
    --shape 704x4096:45
  if [[ ${SERVE:-1} == 1 ]]; then
    CONC=1 bench builtin-1 150 230
    [[ -f $WORK/out/gemv.json ]] && GPUSERVE_GEMV_CONFIGS=$WORK/out/gemv.json CONC=1 bench tuned-2 150 230
    CONC=1 bench builtin-2 150 230
  fi
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

run_mode
