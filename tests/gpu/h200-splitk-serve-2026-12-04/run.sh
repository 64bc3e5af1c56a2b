#!/usr/bin/env bash
# The device calls of 2026-12-04 (nvidia-h200, issue 37): vLLM 0.26.0 with 0001-splitk-gemv-one-token.patch (this
# folder: a Triton split-K block-FP8 GEMV at one token in FlashInferFp8DeepGEMMDynamicBlockScaledKernel's custom op)
# against vLLM unpatched, in a real server on the full GLM-4.6V-FP8 text shape (46 layers + MTP layer, random weights,
# the recipe's command as templates/vllm.j2 renders it, MTP off, without the 60 GiB KV cap), greedy prose at 1, 16 and
# 40 requests, on one lease: unpatched, patched, unpatched, patched (each one server start).
# vLLM 0.26.0 + the engine part (DeepGEMM's JIT headers, flashinfer 0.6.14), VLLM_DEEP_GEMM_WARMUP=skip, as
# ../h200-step-after-2026-12-04/ (its run.sh is the model of this one), with the helpers in ../device_lib.sh.
# On the workstation (.whl/ is ignored), hard links of the parts made there on 2026-12-04:
#   .whl/s1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/s2: vllm/ {vllm-part-01}
#   .whl/s3: vllm/ {vllm-part-02}, jit-cache/ (.whl/jit-cache: the JIT caches packed by 2026-12-04's step-after run)
# The calls, from the checkout's root, back to back on one lease (run tool, kind nvidia-h200):
#   s1: CALL=s1 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh stash .whl/s1       carry [".whl/s1"]
#   s2: CALL=s2 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh stash .whl/s2       carry [".whl/s2"]
#   s3: CALL=s3 LEASE_LEFT=S bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh start .whl/s3   carry [".whl/s3"]
#       unpack vLLM + engine, lay the JIT caches, copy the checkout to /root/repo, start the driver (below) in a
#       session of its own (setsid: it outlives the call, not the lease) and follow it until the call's time is spent.
#       LEASE_LEFT: the session's device seconds left as s3 starts; the driver starts no step that would end later
#       than LEASE_LEFT - SPARE_S (150) from then.
#   s4...: CALL=sN bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh wait .      follow on (CALL_S: the call's seconds)
#   last:  CALL=sN bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh collect .   stop what is left, bring back all
# Each follow leaves in $OUT: device-CALL.log, driver.log and results.tar.xz (everything the driver wrote: bench JSON,
# vLLM's logs, gemv-check.json, apply-series logs), carriage returns made newlines.
# The driver (everything in /root/work; the bench: bench_recipe_vs_defaults.py recipe-no-mtp, NAME=<step>, LAYERS=46
# KINDS=prose CONCURRENCY=1,16,40 REPEATS=5 SIDE='' PREFILL='' REUSE=0 TEMPERATURES=0 DROP=--kv-cache-memory-bytes,
# each server stopped at its end):
#   0. the unpatched flashinfer.py kept (sha256), to be laid back for the second unpatched start
#   1. bench unpatched-1
#   2. the patch applied with the image stage's applier: python3 roles/image/files/apply_series.py --package vllm
#      --version 0.26.0 --dir <this folder> 0001-splitk-gemv-one-token.patch (sha256 of the file after)
#   3. gemv_check.py: the scale as DeepGEMM's post-processing leaves it, the patch's check, the op's time a call with
#      the GEMV on and off in CUDA graphs (gemv-check.json)
#   4. bench patched-1;  5. the unpatched file laid back (sha256 checked), bench unpatched-2;  6. patched again, bench
#      patched-2 (as the deadline allows)
# What ran on 2026-12-04 (report.md, "Calls"), one lease, back to back, each as the run tool's command (kind nvidia-h200)
# with its carry and timeout_s; this script as run then differed from this file in these header lines only:
#   s1: CALL=s1 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh stash .whl/s1          carry [".whl/s1"], 120
#   s2: CALL=s2 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh stash .whl/s2          carry [".whl/s2"], 120
#   s3: CALL=s3 LEASE_LEFT=1755 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh start .whl/s3   carry [".whl/s3"], 600
#       (the patch then in the checkout: its first version, whose guard refused use_deep_gemm_e8m0 = True: report.md)
#   s4: the fixed patch copied over the driver's copy before the driver reached its second patch_on, then the follow:
#       cp tests/gpu/h200-splitk-serve-2026-12-04/0001-splitk-gemv-one-token.patch /root/repo/tests/gpu/h200-splitk-serve-2026-12-04/ &&
#       sha256sum /root/repo/tests/gpu/h200-splitk-serve-2026-12-04/0001-splitk-gemv-one-token.patch && tail -3 /root/work/driver.log &&
#       CALL=s4 CALL_S=560 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh wait .                       no carry, 590
#   s5: a third pair on the same machine, inline (the file patched as the driver left it, then the unpatched laid back):
#       export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=skip;
#       S=/root/vllm/site; T=vllm/model_executor/kernels/linear/scaled_mm/flashinfer.py; b(){ echo "== $(date -u +%T) $1:
#       $(sha256sum $S/$T | cut -c1-16)"; (cd /root/repo && NAME=$1 BUDGET_S=230 LAYERS=46 KINDS=prose CONCURRENCY=1,16,40
#       REPEATS=5 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=200 DROP=--kv-cache-memory-bytes TEMPERATURES=0 timeout -s INT 270
#       python3 tests/gpu/bench_recipe_vs_defaults.py /root/work/out recipe-no-mtp $S > /root/work/out/bench-$1.log 2>&1);
#       grep "tok/s\|healthy" /root/work/out/bench-$1.log; }; b patched-3; cp /root/flashinfer.py.unpatched $S/$T;
#       b unpatched-3; echo "vLLM servers left: $(pgrep -c -f 'm vllm.entrypoints.cli.main')"; grep -h "in use at one token"
#       /root/work/out/vllm-patched-*.log | cut -c1-220; CALL=s5 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh collect .
#                                                                                                              no carry, 590
#       (the count of servers left counts the command's own line; the banner after it read 0 MiB used on the GPU)
#   w1: grep -h "14336" /root/work/out/gemv-check.log | cut -c1-200 | head -5; grep -c "" /root/work/out/vllm-patched-2.log;
#       grep -n "class Glm4MoeAttention" -A60 /root/vllm/site/vllm/model_executor/models/glm4_moe.py | grep -n "qkv\|norm" | head -20
#                                                                                                              no carry, 30
#   w2: sleep 50; echo warm      (the machine kept while the patch's diagnostic log line was written)   no carry, 60
#   s6: the final patch (a log line where the GEMV is not taken) on the restored file, one server at one request:
#       export ... (as s5); D=/root/repo/tests/gpu/h200-splitk-serve-2026-12-04; cp tests/gpu/h200-splitk-serve-2026-12-04/0001-splitk-gemv-one-token.patch $D/;
#       cp /root/flashinfer.py.unpatched $S/$T; (cd /root && PYTHONPATH=$S python3 /root/repo/roles/image/files/apply_series.py
#       --package vllm --version 0.26.0 --dir $D 0001-splitk-gemv-one-token.patch) > /root/work/out/apply-series-4.log 2>&1;
#       cat /root/work/out/apply-series-4.log; echo "== $(date -u +%T) patched-4: $(sha256sum $S/$T | cut -c1-16)";
#       (cd /root/repo && NAME=patched-4 BUDGET_S=200 LAYERS=46 KINDS=prose CONCURRENCY=1 REPEATS=5 SIDE='' PREFILL='' REUSE=0
#       HEALTH_TIMEOUT=170 DROP=--kv-cache-memory-bytes TEMPERATURES=0 timeout -s INT 230 python3 tests/gpu/bench_recipe_vs_defaults.py
#       /root/work/out recipe-no-mtp $S > /root/work/out/bench-patched-4.log 2>&1); grep "tok/s\|healthy" /root/work/out/bench-patched-4.log;
#       grep -h "not taken\|in use at one\|not used" /root/work/out/vllm-patched-4.log | cut -c1-300; cp /root/flashinfer.py.unpatched $S/$T;
#       CALL=s6 bash tests/gpu/h200-splitk-serve-2026-12-04/run.sh collect .                                   no carry, 280
#   then give_back (388 s of the session's 1,800 left).
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
# Landed as patches/vllm/0004-splitk-gemv-one-token.patch; the calls below ran it from this folder as
# 0001-splitk-gemv-one-token.patch (sha256 828d9551c40d4581..., flashinfer.py 9fa2c2024c131031 patched). Changed
# since: a shape without a measured config keeps vLLM's kernel (GPUSERVE_SPLITK_GEMV=any: the rule), and the guard's
# unused e8m0 argument is gone; the four served shapes take the same path.
PATCH_DIR=${PATCH_DIR:-$HERE/../../../patches/vllm}
PATCH=${PATCH:-0004-splitk-gemv-one-token.patch}

until_deadline() { echo $(( $(cat "$WORK/deadline") - $(date +%s) )); }

step() {  # NAME NEED LIMIT COMMAND...: run COMMAND guarded for min(LIMIT, time to the deadline) s if NEED s are left
  local name=$1 need=$2 limit=$3 start left_s
  shift 3
  left_s=$(until_deadline)
  if (( left_s < need )); then
    echo "== $(date -u +%T) $name: not started ($left_s s to the deadline, needs $need)"
    return 1
  fi
  (( limit > left_s )) && limit=$left_s
  start=$(date +%s)
  echo "== $(date -u +%T) $name: started, stopped after $limit s"
  guarded "$limit" "$@"
  echo "== $(date -u +%T) $name rc=$? in $(( $(date +%s) - start )) s"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
}

bench() {  # NAME NEED LIMIT: one server start of bench mode recipe-no-mtp, its rows, the server stopped
  local name=$1 need=$2 limit=$3
  echo "== $name: $TARGET sha256 $(sha256sum "$SITE/$TARGET" | cut -c1-16)"
  step "$name" "$need" "$limit" env NAME="$name" BUDGET_S=$(( limit - 50 )) LAYERS=46 KINDS=prose \
    CONCURRENCY=1,16,40 REPEATS=5 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=$(( limit - 90 )) \
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

patch_off() {
  cp /root/flashinfer.py.unpatched "$SITE/$TARGET"
  echo "== $(date -u +%T) unpatched file laid back: sha256 $(sha256sum "$SITE/$TARGET" | cut -c1-16)" \
    "(unpatched: $(cut -c1-16 /root/flashinfer.py.unpatched.sha256))"
}

results() {  # everything the driver wrote, into $OUT (carriage returns made newlines)
  local f
  [[ -f $WORK/driver.log ]] && tr '\r' '\n' < "$WORK/driver.log" > "$OUT/driver.log"
  rm -rf /root/results && mkdir -p /root/results
  (cd "$WORK" && find . -type f ! -name driver.log ! -name driver.pid ! -name deadline) |
    while read -r f; do
      mkdir -p "/root/results/$(dirname "$f")"
      tr '\r' '\n' < "$WORK/$f" > "/root/results/$f"
    done
  tar -C /root/results -cf - . | xz -T0 -6 > "$OUT/results.tar.xz"
  ls -la "$OUT"
}

follow() {  # the driver's log as it grows, until the driver ends or this call's time is spent; then its files to $OUT
  local pid tailpid
  pid=$(cat "$WORK/driver.pid")
  tail -n +1 -f "$WORK/driver.log" --pid "$pid" &
  tailpid=$!
  while kill -0 "$pid" 2>/dev/null && (( $(left) > 15 )); do sleep 3; done
  sleep 1
  kill "$tailpid" 2>/dev/null
  if kill -0 "$pid" 2>/dev/null; then echo "== $(date -u +%T) driver $pid still running"; else echo "== driver ended"; fi
  results
}

if [[ $MODE == drive ]]; then  # detached (setsid) by start
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline; $(python3 -c 'import triton; print("triton", triton.__version__)')"
  cp "$SITE/$TARGET" /root/flashinfer.py.unpatched
  sha256sum "$SITE/$TARGET" | tee /root/flashinfer.py.unpatched.sha256
  bench unpatched-1 200 430
  patch_on 1
  step gemv-check 100 150 env PYTHONPATH="$SITE" python3 "$HERE/gemv_check.py" "$WORK/out" > "$WORK/out/gemv-check.log" 2>&1
  grep -v "^$" "$WORK/out/gemv-check.log" | cut -c1-600 | tail -30
  bench patched-1 200 430
  patch_off
  bench unpatched-2 170 400
  patch_on 2
  bench patched-2 170 400
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

exec > >(tee "$OUT/device-$TAG.log") 2>&1
device_banner "$TAG"
case $MODE in
  stash)
    stash
    df -h / | tail -1
    ;;
  start)
    unpack_once "$REPO" || exit 3
    [[ -d $C/jit-cache ]] && jit_cache_lay "$C/jit-cache"
    rm -rf /root/repo "$WORK" && mkdir -p "$WORK/out" /root/repo
    tar -C "$REPO" --exclude=./.whl -cf - . | tar -C /root/repo -xf -
    echo $(( T0 + ${LEASE_LEFT:?the device seconds left as the call starts} - ${SPARE_S:-150} )) > "$WORK/deadline"
    echo "== deadline $(date -u -d "@$(cat "$WORK/deadline")" +%T) ($(until_deadline) s from now)"
    # the driver runs from the copy (the checkout here is laid down again by every call)
    setsid bash /root/repo/tests/gpu/h200-splitk-serve-2026-12-04/run.sh drive "$C" > "$WORK/driver.log" 2>&1 < /dev/null &
    echo $! > "$WORK/driver.pid"
    echo "== driver started, pid $(cat "$WORK/driver.pid")"
    follow
    ;;
  wait)
    follow
    ;;
  collect)
    pid=$(cat "$WORK/driver.pid" 2>/dev/null)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      echo "== driver $pid still running: its step stopped"
      kill -INT -- "-$(cat /tmp/guarded.pgid)" 2>/dev/null
      sleep 30
      kill -- "-$pid" 2>/dev/null
    fi
    results
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
