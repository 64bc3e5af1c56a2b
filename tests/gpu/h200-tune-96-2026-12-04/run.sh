#!/usr/bin/env bash
# The device calls of 2026-12-04 (nvidia-h200, issue 37: "autotune that pays"), back to back on one lease, each from
# the checkout's root: CALL=iN bash tests/gpu/h200-tune-96-2026-12-04/run.sh MODE CARRIED   (carry per call below)
# ../h200-tune-11-2026-12-03/ again with the current code: the reduced MoE tune with the 11 batch sizes of
# REDUCED_BATCH_SIZES (plugins/module_utils/autotune.py) and, since 5e42775, 96 tile configs (REDUCED in
# roles/autotune/files/tune_moe.py: GROUP_SIZE_M {1, 16, 32}), run by tests/gpu/tune_moe_reduced.py at --tp-size 1,
# then the recipe as shipped served with that file and without it (vLLM 0.26.0 + carry.sh engine,
# VLLM_DEEP_GEMM_WARMUP=skip; the full GLM-4.6V-FP8 text shape, 46 layers, random weights; the JIT caches laid down
# before the first start). The carried parts are the ones that run used (.whl/ is ignored; nothing remade):
#   i1: carry [".whl/h1"]         vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   i2: carry [".whl/h2"]         vllm/ {vllm-part-01}, jit-cache/ {jit-cache-part-00, inductor-cache.tar.xz, SHA256SUMS,
#                                 manifest}
#   i3: carry [".whl/h3"]         tune/ {ray-part-00}
#   i4: carry [".whl/h4"]         tune/ {ray-part-01, ray-wheel-name, benchmark_moe.py, SHA256SUMS}
#   i5: carry [".whl/h5/vllm"]    vllm/ {vllm-part-02} (not .whl/h5/autotune/: that is the 11-size file)
# The calls:
#   i1..i4: CALL=iN bash .../run.sh stash .whl/hN   (N = 1..4; parts, caches and the tune's files kept in /root/stash)
#   i5: CALL=i5 DRIVER_S=N bash .../run.sh start .whl/h5   unpack vLLM + engine, install Ray from its parts, lay the JIT
#       caches down, copy the checkout to /root/repo, start the driver (below) detached (setsid: it outlives the call,
#       not the lease) with N seconds to run, and follow it until the call's time is spent
#   i6...: CALL=iN bash .../run.sh wait .                follow the driver on; its files into $OUT (5 files)
# What ran (report.md), 2026-12-03 23:52 - 2026-12-04 00:14 UTC, one lease, calls back to back (no carry after i5):
#   (a first call for i1 at 23:46 got no machine: "no device machine could be started right now", 91 s of budget)
#   i1..i4 as above; i5: CALL=i5 DRIVER_S=1430 ... start .whl/h5 (carry [".whl/h5/vllm"]): the tune ran and
#   validated (579 s in the driver); i6: CALL=i6 ... wait .: tune96-tuned, tune96-default, tune96-default-2 ran,
#   tune96-tuned-2 was starting; i7: CALL=i7 ... wait .: tune96-tuned-2 ran, the driver ended; then give_back.
# The driver: (1) the tune: tune_moe_reduced.py /root/work/tune benchmark_moe.py 1 (the stage's command through
# roles/autotune/files/tune_moe.py --search reduced, validated by the stage's own validate_moe); (2) its file alone in
# /root/autotune; (3) up to four starts of the recipe's rendered command, in the order tuned, default, default, tuned
# (bench mode recipe-no-mtp, as ../h200-tune-11-2026-12-03/: the example inventory, llm_drafter off, --max-num-seqs 40,
# the 512 capture size, one GPU, text only, without the 60 GiB KV cap), prose rows at 1, 16 and 40 requests, greedy,
# 256-token replies, a warm-up pass at the row's shape and REPEATS=3 timed passes; no structured, prefill or reuse rows:
#   tune96-tuned[-2]:   VLLM_TUNED_CONFIG_FOLDER=/root/autotune (as roles/service/vars/main.yml gives the stage's folder)
#   tune96-default[-2]: the same without it
#   each start only when >= 220 s of DRIVER_S are left (a start with its rows took ~165 s on 2026-12-03).
# TUNED_FROM=DIR (a folder holding a tuned file from an earlier lease) skips the tune, for a lease lost after it.
# No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|start|wait|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=${WORK:-/root/work}
# shellcheck source=tests/gpu/device_lib.sh disable=SC1091  # followed with shellcheck -x from the root
source "$(dirname "$SELF")/../device_lib.sh"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
export PATH=$CUDA_HOME/bin:$PATH

bench() {  # NAME LIMIT [ENV=VALUE ...]: one server start, its prose rows, the server stopped
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $(date -u +%T) $name: bench mode recipe-no-mtp (stopped after $limit s) $*"
  guarded "$limit" env NAME="$name" BUDGET_S=$(( limit - 50 )) LAYERS=46 KINDS=prose CONCURRENCY=1,16,40 \
    REPEATS=3 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=$(( limit - 90 )) DROP=--kv-cache-memory-bytes \
    TEMPERATURES=0 "$@" python3 /root/repo/tests/gpu/bench_recipe_vs_defaults.py "$WORK/out" recipe-no-mtp "$VLLM_DEST/site"
  rc=$?
  echo "== $(date -u +%T) $name rc=$rc in $(( $(date +%s) - start )) s; caches: $(jit_cache_sizes)"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
  echo "== kernel record ($name):"
  grep -E "Fp8 MoE backend|MoE config|for MoE layer|Graph capturing finished|Directly load|init engine|jit_monitor|\
GPU KV cache size" "$WORK/out/vllm-$name.log" | cut -c1-320 | head -20
}

follow() {  # the driver's log as it grows, until the driver ends or this call's time is spent; then its files to $OUT
  local pid tailpid f logs
  pid=$(cat "$WORK/driver.pid")
  tail -n +1 -f "$WORK/driver.log" --pid "$pid" &
  tailpid=$!
  while kill -0 "$pid" 2>/dev/null && (( $(left) > 15 )); do sleep 3; done
  sleep 1
  kill "$tailpid" 2>/dev/null
  if kill -0 "$pid" 2>/dev/null; then echo "== $(date -u +%T) driver $pid still running"; else echo "== driver ended"; fi
  # at most 8 files come back, named in letters, digits, '.', '_', '-' only (so not the tuned file's own name): the
  # driver's log, the tune's results and file, and the rest packed (the tune's log, the bench JSONs, the servers' logs)
  # shellcheck disable=SC2094  # read from /root/work, written to $OUT
  [[ -f $WORK/driver.log ]] && tr '\r' '\n' < "$WORK/driver.log" > "$OUT/driver.log"
  [[ -f $WORK/tune/results.json ]] && cp "$WORK/tune/results.json" "$OUT/tune-results.json"
  f=$(compgen -G "$WORK/tune/tuned/E=*.json" | head -1)
  [[ -n $f ]] && cp "$f" "$OUT/tuned-file.json"
  logs=()
  for f in "$WORK"/tune/tune.log "$WORK"/out/*.json "$WORK"/out/vllm-*.log; do [[ -f $f ]] && logs+=("${f#"$WORK"/}"); done
  (( ${#logs[@]} )) && tar -C "$WORK" -cJf "$OUT/files.tar.xz" --transform 's,.*/,,' "${logs[@]}"
  ls -la "$OUT"
}

if [[ $MODE == drive ]]; then  # detached (setsid) by start: the tune, then the servers, within DRIVER_S
  END=$(( T0 + ${DRIVER_S:?} ))
  if [[ -n ${TUNED_FROM:-} ]]; then
    tuned=$(compgen -G "$TUNED_FROM/E=*.json" | head -1)
    [[ -n $tuned ]] || { echo "== no tuned file in $TUNED_FROM"; exit 1; }
  else
    echo "== $(date -u +%T) tune: tune_moe_reduced.py ($(grep -o '^REDUCED_BATCH_SIZES = .*' \
  /root/repo/plugins/module_utils/autotune.py); $(grep -A1 '^REDUCED = ' /root/repo/roles/autotune/files/tune_moe.py | tr -s ' \n' ' '))"
    start=$(date +%s)
    (cd /root/repo && guarded $(( END - start - 60 )) env PYTHONPATH="$VLLM_DEST/site:/root/ray" \
      python3 tests/gpu/tune_moe_reduced.py "$WORK/tune" "$STASH/tune/benchmark_moe.py" 1)
    echo "== $(date -u +%T) tune rc=$? in $(( $(date +%s) - start )) s"
    grep -E "Completed tuning|Tuning took|configurations" "$WORK/tune/tune.log" | cut -c1-200
    [[ -x /root/ray/bin/ray ]] && PYTHONPATH="$VLLM_DEST/site:/root/ray" /root/ray/bin/ray stop 2>&1 | tail -2
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
    tuned=$(compgen -G "$WORK/tune/tuned/E=*.json" | head -1)
    if [[ -z $tuned ]] || ! python3 -c "import json,sys; sys.exit(json.load(open('$WORK/tune/results.json'))['problems'] != [])"; then
      echo "== no valid tuned file: the servers are not started"
      exit 1
    fi
  fi
  rm -rf /root/autotune && mkdir -p /root/autotune && cp "$tuned" /root/autotune/
  ls -la /root/autotune; sha256sum /root/autotune/*
  for name in tune96-tuned tune96-default tune96-default-2 tune96-tuned-2; do
    rest=$(( END - $(date +%s) ))
    if (( rest < 220 )); then
      echo "== $(date -u +%T) $name not started: $rest s of the driver's time left (< 220)"
      continue
    fi
    if [[ $name == tune96-tuned* ]]; then
      bench "$name" $(( rest < 300 ? rest : 300 )) VLLM_TUNED_CONFIG_FOLDER=/root/autotune
    else
      bench "$name" $(( rest < 300 ? rest : 300 ))
    fi
  done
  echo "== $(date -u +%T) driver done"
  exit 0
fi

exec > >(tee "$OUT/device-$TAG.log") 2>&1
device_banner "$TAG"
case $MODE in
  stash)
    stash
    [[ -d $C/jit-cache ]] && cp -a "$C/jit-cache" "$STASH/" && ls -la "$STASH/jit-cache"
    if [[ -d $C/tune ]]; then mkdir -p "$STASH/tune" && cp "$C"/tune/* "$STASH/tune/" && ls -la "$STASH/tune"; fi
    df -h / | tail -1
    ;;
  start)
    unpack_once "$PWD" || exit 3
    start=$(date +%s)
    if [[ -d $STASH/tune ]]; then
      (cd "$STASH/tune" && sha256sum -c SHA256SUMS) || exit 5
      cat "$STASH"/tune/ray-part-* > "/root/$(cat "$STASH/tune/ray-wheel-name")"
      python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /root/ray \
        "/root/$(cat "$STASH/tune/ray-wheel-name")" || exit 5
      PYTHONPATH="$VLLM_DEST/site:/root/ray" python3 -c "import ray; print('ray', ray.__version__)" || exit 5
      echo "== Ray installed in $(( $(date +%s) - start )) s"
    fi
    jit_cache_lay "$STASH/jit-cache" || exit 4
    rm -rf /root/repo "$WORK" && mkdir -p "$WORK/out" /root/repo
    tar --exclude=./.whl -cf - . | tar -C /root/repo -xf -   # the driver runs from the copy (calls lay the checkout again)
    DRIVER_S=${DRIVER_S:?} TUNED_FROM=${TUNED_FROM:-} setsid bash /root/repo/tests/gpu/h200-tune-96-2026-12-04/run.sh drive "$STASH" \
      > "$WORK/driver.log" 2>&1 < /dev/null &
    echo $! > "$WORK/driver.pid"
    echo "== driver started, pid $(cat "$WORK/driver.pid"), ${DRIVER_S} s"
    follow
    ;;
  wait)
    follow
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
