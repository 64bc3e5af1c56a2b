#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 37 item 6 and item 5's missing rows), back to back on one lease,
# each from the checkout's root with carry [".whl/fN"]: CALL=fN bash tests/gpu/h200-ngram-cost-2026-12-03/run.sh MODE .whl/fN
# The method of ../h200-graphs-ngram-2026-12-03/ (the engine users run: vLLM 0.26.0 + carry.sh engine,
# VLLM_DEEP_GEMM_WARMUP=skip; the full GLM-4.6V-FP8 text shape, 46 layers, random weights, the recipe's rendered
# command without the 60 GiB KV cap, MTP off), with the helpers in ../device_lib.sh. On the workstation (.whl/ is ignored):
#   bash tests/gpu/carry.sh vllm engine          # vllm-part-00..02 (<= 40 MiB each), engine-part-00
#   .whl/f1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}   (hard links)
#   .whl/f2: vllm/ {vllm-part-01}
#   .whl/f3: vllm/ {vllm-part-02}, repo/ = `git archive` of the commit named in report.md (the branch as committed)
# The calls:
#   f1: CALL=f1 bash .../run.sh stash .whl/f1
#   f2: CALL=f2 bash .../run.sh stash .whl/f2
#   f3: CALL=f3 bash .../run.sh start .whl/f3   unpack, copy repo/ to /root/repo, start the driver (below) in a session
#       of its own (setsid: it outlives the call, not the lease), then follow it until the call's time is spent
#   f4, f5: CALL=fN bash .../run.sh wait .whl/f3   follow the driver on until it ends or the call's time is spent
#   f6: CALL=f6 bash .../run.sh cache .whl/f3   the JIT caches the starts compiled, packed into $OUT (device_lib.sh)
# What ran (report.md; .whl/f3/repo: git archive of db6dceb, this script as committed there), one lease, back to back:
#   f1, f2, f3 as above; f4: CALL=f4 bash .../run.sh wait .   (no carry: the driver ended in it)
#   f5: CALL=f5 bash .../run.sh cache .; du -sh /root/.cache/* /tmp/torchinductor_root 2>/dev/null
#   f6 (the ngram server started again, temperature 1.0 only; then Inductor's cache, which jit_cache_pack left out):
#     export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=skip;
#     mkdir -p /root/work/out6; cd /root/repo && NAME=full-ngram-t1-again BUDGET_S=420 LAYERS=46 KINDS=prose
#     CONCURRENCY=1,16,40 REPEATS=3 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=330 DROP=--kv-cache-memory-bytes
#     TEMPERATURES=1.0 timeout -s INT 480 python3 tests/gpu/bench_recipe_vs_defaults.py /root/work/out6 recipe-ngram
#     /root/vllm/site 2>&1 | tee $OUT/device-f6.log; echo "rc=$? vLLM processes left: $(pgrep -fc vllm.entrypoints)";
#     for f in /root/work/out6/*; do tr '\r' '\n' < $f > $OUT/$(basename $f); done; grep -i "SpecDecoding
#     metrics\|Graph capturing finished\|compil\|JIT" $OUT/vllm-full-ngram-t1-again.log | cut -c1-300 | tail -25;
#     tar -C / -cf - tmp/torchinductor_root | xz -T0 -6 > $OUT/inductor-cache.tar.xz; ls -la $OUT
#   f7 (the no-drafter server again, temperature 1.0 only): as f6 with out7, NAME=full-off-t1-again BUDGET_S=330
#     HEALTH_TIMEOUT=250, timeout -s INT 380, mode recipe-no-mtp, device-f7.log, then: sleep 3; echo "vLLM servers
#     left: $(pgrep -c -f 'm vllm.entrypoints.cli.main')"; the same copy; grep -i "Graph capturing finished\|jit_monitor"
#   (the process counts printed by f6 and f7 count their own command lines, which hold the pattern)
# A start of the full shape on a fresh machine takes longer than a call may run (406 s unhealthy on 2026-12-03, during
# flashinfer's JIT and CUDA-graph capture): the driver, not a call, waits for it (HEALTH_TIMEOUT=1100).
# The driver: one server start a command, every row of it on that start, each row a warm-up pass at its own shape and
# REPEATS=3 timed passes (median [min, max]), prose (ignore_eos), 256-token replies, 1, 16 and 40 requests:
#   full-ngram-t1: bench mode recipe-ngram (the rendered command with the example's drafter, --speculative-config
#       {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}), rows at temperature 1.0, then greedy
#   full-off-t1:   bench mode recipe-no-mtp (the rendered command, no drafter), rows at temperature 1.0, then greedy
# (both with --compilation-config {"max_cudagraph_capture_size": 512}, which the template renders since 2026-12-03)
# Everything the driver writes is in /root/work; a call copies it into $OUT with carriage returns made newlines.
# No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|start|wait|cache|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=/root/work
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "$SELF")/../device_lib.sh"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
export PATH=$CUDA_HOME/bin:$PATH

bench() {  # NAME BENCH_MODE LIMIT [ENV=VALUE ...]: one server start, its rows, the server stopped
  local name=$1 mode=$2 limit=$3 start
  shift 3
  start=$(date +%s)
  echo "== $(date -u +%T) $name: bench mode $mode (stopped after $limit s) $*"
  guarded "$limit" env NAME="$name" BUDGET_S=$(( limit - 60 )) LAYERS=46 KINDS=prose CONCURRENCY=1,16,40 REPEATS=3 \
    SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=1100 DROP=--kv-cache-memory-bytes "$@" \
    python3 /root/repo/tests/gpu/bench_recipe_vs_defaults.py "$WORK/out" "$mode" "$VLLM_DEST/site"
  echo "== $(date -u +%T) $name rc=$? in $(( $(date +%s) - start )) s; caches: $(jit_cache_sizes)"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  grep -o "'max_cudagraph_capture_size': [0-9]*" "$WORK/out/vllm-$name.log" | sort -u
  grep -i "Graph capturing finished\|SpecDecoding metrics" "$WORK/out/vllm-$name.log" | tail -3
}

follow() {  # the driver's log as it grows, until the driver ends or this call's time is spent; then its files to $OUT
  local pid tailpid f
  pid=$(cat "$WORK/driver.pid")
  tail -n +1 -f "$WORK/driver.log" --pid "$pid" &
  tailpid=$!
  while kill -0 "$pid" 2>/dev/null && (( $(left) > 12 )); do sleep 3; done
  sleep 1
  kill "$tailpid" 2>/dev/null
  if kill -0 "$pid" 2>/dev/null; then echo "== $(date -u +%T) driver $pid still running"; else echo "== driver ended"; fi
  for f in "$WORK/driver.log" "$WORK"/out/*.json "$WORK"/out/vllm-*.log; do
    # shellcheck disable=SC2094  # read from /root/work, written to $OUT
    [[ -f $f ]] && tr '\r' '\n' < "$f" > "$OUT/${f##*/}"
  done
}

if [[ $MODE == drive ]]; then  # detached (setsid) by start: the two servers one after the other
  bench full-ngram-t1 recipe-ngram 1500 TEMPERATURES=1.0,0
  bench full-off-t1 recipe-no-mtp 900 TEMPERATURES=1.0,0
  echo "== $(date -u +%T) driver done"
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
    unpack_once "$C/repo" || exit 3
    [[ -d $C/jit-cache ]] && jit_cache_lay "$C/jit-cache"
    rm -rf /root/repo "$WORK" && mkdir -p "$WORK/out" && cp -a "$C/repo" /root/repo
    # the driver runs from the copy (the checkout here is laid down again by every call)
    setsid bash /root/repo/tests/gpu/h200-ngram-cost-2026-12-03/run.sh drive "$C" > "$WORK/driver.log" 2>&1 < /dev/null &
    echo $! > "$WORK/driver.pid"
    echo "== driver started, pid $(cat "$WORK/driver.pid")"
    follow
    ;;
  wait)
    follow
    ;;
  cache)
    pid=$(cat "$WORK/driver.pid" 2>/dev/null)
    if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
      echo "== driver $pid still running: its bench stopped"
      kill -INT -- "-$(cat /tmp/guarded.pgid)" 2>/dev/null
      sleep 30
    fi
    jit_cache_pack "$OUT" 58
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
