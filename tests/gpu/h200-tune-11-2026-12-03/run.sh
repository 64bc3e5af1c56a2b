#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 37: "autotune that pays"), back to back on one lease, each from
# the checkout's root: CALL=hN bash tests/gpu/h200-tune-11-2026-12-03/run.sh MODE .whl/hN   (carry [".whl/hN"])
# The autotune stage's reduced MoE tune with the 11 batch sizes of REDUCED_BATCH_SIZES (plugins/module_utils/autotune.py:
# 1, 2, 4, 8, 16, 24, 32, 48, 64, 256, 1024), run by tests/gpu/tune_moe_reduced.py at --tp-size 1, then the recipe as
# shipped served with that file and without it, as ../h200-as-shipped-2026-12-03/ did (the engine users run: vLLM
# 0.26.0 + carry.sh engine, VLLM_DEEP_GEMM_WARMUP=skip; the full GLM-4.6V-FP8 text shape, 46 layers, random weights;
# its JIT caches laid down before the first start). On the workstation (.whl/ is ignored; hard links to parts made
# earlier and checked against their SHA256SUMS, not rebuilt; tune/ made by
# `BENCHMARK_MOE_PY=.../vllm-0.26.0/benchmarks/kernels/benchmark_moe.py bash tests/gpu/carry.sh tune`):
#   .whl/h1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/h2: vllm/ {vllm-part-01}, jit-cache/ {jit-cache-part-00, inductor-cache.tar.xz, SHA256SUMS, manifest}
#   .whl/h3: tune/ {ray-part-00}
#   .whl/h4: tune/ {ray-part-01, ray-wheel-name, benchmark_moe.py, SHA256SUMS}
#   .whl/h5: vllm/ {vllm-part-02}
# The calls:
#   h1..h4: CALL=hN bash .../run.sh stash .whl/hN      (parts, caches and the tune's files kept in /root/stash)
#   h5: CALL=h5 DRIVER_S=N bash .../run.sh start .whl/h5   unpack vLLM + engine, install Ray from its parts, lay the JIT
#       caches down, copy the checkout to /root/repo, start the driver (below) detached (setsid: it outlives the call,
#       not the lease) with N seconds to run, and follow it until the call's time is spent
#   h6...: CALL=hN bash .../run.sh wait .                follow the driver on; its files into $OUT (7 files)
# The driver: (1) the tune: tune_moe_reduced.py /root/work/tune benchmark_moe.py 1 (the stage's command through
# roles/autotune/files/tune_moe.py --search reduced, validated by the stage's own validate_moe); (2) its file alone in
# /root/autotune; (3) two starts of the recipe's rendered command (bench mode recipe-no-mtp, as
# ../h200-as-shipped-2026-12-03/: the example inventory, llm_drafter off, --max-num-seqs 40, the 512 capture size,
# one GPU, text only, without the 60 GiB KV cap), prose rows at 1, 16 and 40 requests, greedy, 256-token replies,
# a warm-up pass at the row's shape and REPEATS=3 timed passes; no structured, prefill or reuse rows:
#   tune11-tuned:   VLLM_TUNED_CONFIG_FOLDER=/root/autotune (as roles/service/vars/main.yml gives the stage's folder)
#   tune11-default: the same without it (started only when >= 240 s of DRIVER_S are left)
# What ran (report.md), 2026-12-03 20:01-20:27 UTC, two leases (the first went back between h5b and h6):
#   h1..h4 as above; h5: CALL=h5 DRIVER_S=1250 ... start .whl/h5 stopped at the Ray check (no jsonschema on
#   PYTHONPATH=/root/ray alone; the check now puts vLLM's site/ first, as the tune does); h5b: the same again (vLLM
#   unpacked by h5 was kept): the tune ran and validated; the tuned server had started when the call ended
#   h6: CALL=h6 ... wait .   found a fresh machine (the lease had gone back: h6 came > 30 s after h5b ended)
#   h7: CALL=h7 ... stash .whl/h1   h8: CALL=h8 ... stash .whl/h2   (the same parts again)
#   h9: CALL=h9 DRIVER_S=540 TUNED_FROM=/root/stash/autotune ... start .whl/h5, with .whl/h5/autotune/ holding the
#       tune's file as h5b's results.json returned it (json.dump indent=4 + newline: sha256 9f7e5077...a453e, the
#       same as the machine's); the driver ran tune11-tuned and tune11-default, and ended inside the call
#   h10 (second starts, the other order, default first; no carry), inline:
#     cd /root/repo && export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
#     VLLM_DEEP_GEMM_WARMUP=skip; mkdir -p /root/work/out2; for s in default tuned; do E=; [ $s = tuned ] &&
#     E=VLLM_TUNED_CONFIG_FOLDER=/root/autotune; echo "== $(date -u +%T) tune11-$s-2 $E"; env $E NAME=tune11-$s-2
#     BUDGET_S=200 LAYERS=46 KINDS=prose CONCURRENCY=1,16,40 REPEATS=3 SIDE= PREFILL= REUSE=0 HEALTH_TIMEOUT=170
#     DROP=--kv-cache-memory-bytes TEMPERATURES=0 timeout -s INT 230 python3 tests/gpu/bench_recipe_vs_defaults.py
#     /root/work/out2 recipe-no-mtp /root/vllm/site 2>&1 | tee -a $OUT/device-h10.log; echo "rc=$? $(date -u +%T)";
#     sleep 3; grep -E "MoE config|for MoE layer|jit_monitor.py:135|Graph capturing finished|init engine"
#     /root/work/out2/vllm-tune11-$s-2.log | cut -c1-220; done 2>&1 | tee -a $OUT/device-h10b.log; for f in
#     /root/work/out2/*; do tr '\r' '\n' < $f > $OUT/$(basename $f); done; ls -la $OUT
# No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|start|wait|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=/root/work
MARK=/root/jit-laid.marker
# shellcheck source=tests/gpu/device_lib.sh
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
  # at most 8 files come back: the driver's log, the tune's results and file, the bench JSONs, the other logs packed
  for f in "$WORK/driver.log" "$WORK"/out/*.json "$WORK"/tune/results.json "$WORK"/tune/tuned/E=*.json; do
    # shellcheck disable=SC2094  # read from /root/work, written to $OUT
    [[ -f $f ]] && tr '\r' '\n' < "$f" > "$OUT/${f##*/}"
  done
  logs=()
  for f in "$WORK"/tune/tune.log "$WORK"/out/vllm-*.log; do [[ -f $f ]] && logs+=("${f#"$WORK"/}"); done
  (( ${#logs[@]} )) && tar -C "$WORK" -cJf "$OUT/logs.tar.xz" --transform 's,.*/,,' "${logs[@]}"
  ls -la "$OUT"
}

if [[ $MODE == drive ]]; then  # detached (setsid) by start: the tune, then the two servers, within DRIVER_S
  END=$(( T0 + ${DRIVER_S:?} ))
  if [[ -n ${TUNED_FROM:-} ]]; then  # the tune's file from an earlier lease (h9, below): no tune here
    tuned=$(compgen -G "$TUNED_FROM/E=*.json" | head -1)
    [[ -n $tuned ]] || { echo "== no tuned file in $TUNED_FROM"; exit 1; }
  else
    echo "== $(date -u +%T) tune: tune_moe_reduced.py (REDUCED_BATCH_SIZES: $(grep -o '^REDUCED_BATCH_SIZES = .*' \
  /root/repo/plugins/module_utils/autotune.py))"
    start=$(date +%s)
    (cd /root/repo && guarded 1000 env PYTHONPATH="$VLLM_DEST/site:/root/ray" \
      python3 tests/gpu/tune_moe_reduced.py "$WORK/tune" "$STASH/tune/benchmark_moe.py" 1)
    echo "== $(date -u +%T) tune rc=$? in $(( $(date +%s) - start )) s"
    grep -E "Completed tuning|Tuning took|configurations" "$WORK/tune/tune.log" | cut -c1-200
    [[ -x /root/ray/bin/ray ]] && PYTHONPATH=/root/ray /root/ray/bin/ray stop 2>&1 | tail -2
    nvidia-smi --query-gpu=memory.used --format=csv,noheader
    tuned=$(compgen -G "$WORK/tune/tuned/E=*.json" | head -1)
    if [[ -z $tuned ]] || ! python3 -c "import json,sys; sys.exit(json.load(open('$WORK/tune/results.json'))['problems'] != [])"; then
      echo "== no valid tuned file: the servers are not started"
      exit 1
    fi
  fi
  rm -rf /root/autotune && mkdir -p /root/autotune && cp "$tuned" /root/autotune/
  ls -la /root/autotune; sha256sum /root/autotune/*
  rest=$(( END - $(date +%s) ))
  bench tune11-tuned $(( rest < 330 ? rest : 330 )) VLLM_TUNED_CONFIG_FOLDER=/root/autotune
  rest=$(( END - $(date +%s) ))
  if (( rest >= 240 )); then
    bench tune11-default $(( rest < 330 ? rest : 330 ))
  else
    echo "== $(date -u +%T) tune11-default not started: $rest s of the driver's time left (< 240)"
  fi
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
    python3 -m pip install -q --no-index --no-deps --no-compile --target /root/ray "/root/$(cat "$STASH/tune/ray-wheel-name")" \
      || exit 5
    PYTHONPATH="$VLLM_DEST/site:/root/ray" python3 -c "import ray; print('ray', ray.__version__)" || exit 5
    echo "== Ray installed in $(( $(date +%s) - start )) s"
    fi
    [[ -d $C/autotune ]] && cp -a "$C/autotune" "$STASH/" && sha256sum "$STASH"/autotune/*
    jit_cache_lay "$STASH/jit-cache" || exit 4
    touch "$MARK"
    rm -rf /root/repo "$WORK" && mkdir -p "$WORK/out" /root/repo
    tar --exclude=./.whl -cf - . | tar -C /root/repo -xf -   # the driver runs from the copy (calls lay the checkout again)
    DRIVER_S=${DRIVER_S:?} TUNED_FROM=${TUNED_FROM:-} setsid bash /root/repo/tests/gpu/h200-tune-11-2026-12-03/run.sh drive "$STASH" \
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
