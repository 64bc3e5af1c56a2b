#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 37: the recipe as shipped), back to back on one lease, each from
# the checkout's root: CALL=gN bash tests/gpu/h200-as-shipped-2026-12-03/run.sh MODE .whl/gN   (carry [".whl/gN"])
# The method of ../h200-ngram-cost-2026-12-03/ (the engine users run: vLLM 0.26.0 + carry.sh engine,
# VLLM_DEEP_GEMM_WARMUP=skip; the full GLM-4.6V-FP8 text shape, 46 layers, random weights; one server start a command,
# every row on it; the helpers in ../device_lib.sh). On the workstation (.whl/ is ignored; the parts checked against
# their SHA256SUMS, not rebuilt):
#   .whl/g1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}   (hard links)
#   .whl/g2: vllm/ {vllm-part-01}, jit-cache/ {jit-cache-part-00, inductor-cache.tar.xz, SHA256SUMS, manifest}
#            (the caches ../h200-ngram-cost-2026-12-03/ packed, never laid down before this run)
#   .whl/g3: vllm/ {vllm-part-02}, repo/ = `git archive` of the commit named in report.md
# The calls:
#   g1: CALL=g1 bash .../run.sh stash .whl/g1      g2: CALL=g2 bash .../run.sh stash .whl/g2   (parts and caches kept)
#   g3: CALL=g3 DRIVER_S=N bash .../run.sh start .whl/g3   unpack, lay the JIT caches down (jit_cache_lay) and mark the
#       time, copy repo/ to /root/repo, start the driver (below) detached (setsid: it outlives the call, not the lease)
#       with N seconds to run, and follow it until the call's time is spent
#   g4...: CALL=gN bash .../run.sh wait .          follow the driver on; its files into $OUT when it has ended
# What ran (report.md; .whl/g3/repo: git archive of a7c51c4, this script as committed there), one lease, back to back:
#   g1, g2 as above; g3: CALL=g3 DRIVER_S=1300 bash .../run.sh start .whl/g3   (the driver ended inside it: no wait call)
#   g4 (a second start of each command, in the other order, default first; no carry, no prefill rows), inline:
#     cd /root/repo && export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1
#     VLLM_DEEP_GEMM_WARMUP=skip; mkdir -p /root/work/out2; for s in default tuned; do E=; [ $s = tuned ] &&
#     E=VLLM_TUNED_CONFIG_FOLDER=/root/autotune; echo "== $(date -u +%T) as-shipped-$s-2 $E"; env $E
#     NAME=as-shipped-$s-2 BUDGET_S=230 LAYERS=46 KINDS=prose,structured CONCURRENCY=1,16,40 REPEATS=3 SIDE= PREFILL=
#     REUSE=0 HEALTH_TIMEOUT=200 DROP=--kv-cache-memory-bytes TEMPERATURES=0 timeout -s INT 280 python3
#     tests/gpu/bench_recipe_vs_defaults.py /root/work/out2 recipe-no-mtp /root/vllm/site 2>&1 | tee -a
#     $OUT/device-g4.log; echo "rc=$? $(date -u +%T)"; sleep 3; echo "vLLM servers left: $(pgrep -c -f 'm
#     vllm.entrypoints.cli.main')"; grep -E "MoE config|for MoE layer|Graph capturing finished|init engine|jit_monitor"
#     /root/work/out2/vllm-as-shipped-$s-2.log | cut -c1-260; done; for f in /root/work/out2/*; do tr '\r' '\n' < $f >
#     $OUT/$(basename $f); done; ls -la $OUT
#   (/root/autotune was made by g3's driver; the process count g4 printed counts its own command lines, which hold the
#   pattern: each server's log ends with "Application shutdown complete", and the second bound the same port)
# The driver: two starts of the recipe's rendered command (bench mode recipe-no-mtp: the example inventory, llm_drafter
# off, --max-num-seqs 40, --compilation-config {"max_cudagraph_capture_size": 512}; one GPU, text only, without the
# 60 GiB KV cap, which is per GPU of four and more than one H200 has left beside the weights, as every earlier
# full-shape run), each with every row: prose and structured at 1, 16, 40 requests, greedy, 256-token replies, a
# warm-up pass at the row's shape and REPEATS=3 timed passes (median [min, max]); then cold prompts of 2,048, 8,192
# and 32,768 tokens:
#   as-shipped-tuned: VLLM_TUNED_CONFIG_FOLDER=/root/autotune holding the autotune stage's file
#       (../h200-tune-moe-2026-11-30/E=128,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json),
#       as roles/service/vars/main.yml gives the engine the stage's folder (/autotune)
#   as-shipped-default: the same without VLLM_TUNED_CONFIG_FOLDER; started only when >= 360 s of DRIVER_S are left
# After each start: the kernel record from vLLM's log, and the files each JIT cache gained after the caches were laid
# down (newer than /root/jit-laid.marker: compiled on this machine, not taken from the cache).
# No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|start|wait|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=/root/work
MARK=/root/jit-laid.marker
TUNED='E=128,N=1408,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json'
# shellcheck source=tests/gpu/device_lib.sh
source "$(dirname "$SELF")/../device_lib.sh"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
export PATH=$CUDA_HOME/bin:$PATH

new_cache_files() {  # what each JIT cache gained since the caches were laid down
  local d
  for d in "${JIT_CACHE_DIRS[@]}"; do
    [[ -d $d ]] && echo "   $d: $(find "$d" -type f -newer "$MARK" | wc -l) files new, $(find "$d" -type f | wc -l) in all"
  done
}

bench() {  # NAME LIMIT [ENV=VALUE ...]: one server start, its rows, the server stopped
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s)
  echo "== $(date -u +%T) $name: bench mode recipe-no-mtp (stopped after $limit s) $*"
  guarded "$limit" env NAME="$name" BUDGET_S=$(( limit - 60 )) LAYERS=46 KINDS=prose,structured CONCURRENCY=1,16,40 \
    REPEATS=3 SIDE='' PREFILL=2048,8192,32768 REUSE=0 HEALTH_TIMEOUT=$(( limit - 100 )) DROP=--kv-cache-memory-bytes \
    TEMPERATURES=0 "$@" python3 /root/repo/tests/gpu/bench_recipe_vs_defaults.py "$WORK/out" recipe-no-mtp "$VLLM_DEST/site"
  rc=$?
  echo "== $(date -u +%T) $name rc=$rc in $(( $(date +%s) - start )) s; caches: $(jit_cache_sizes)"
  new_cache_files
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
  echo "== kernel record ($name):"
  grep -E "Selected .* for Fp8LinearMethod|Fp8 MoE backend|MoE config|for MoE layer|attention backend|top-p & top-k|\
PIECEWISE=|Graph capturing finished|Directly load|torch.compile took|Compiling a graph|init engine|jit_monitor|\
GPU KV cache size|DeepGemm|deep_gemm|E8M0|PDL" "$WORK/out/vllm-$name.log" | cut -c1-420 | head -40
  grep -o "'max_cudagraph_capture_size': [0-9]*\|'cudagraph_capture_sizes': \[[0-9, ]*\]" "$WORK/out/vllm-$name.log" | sort -u
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

if [[ $MODE == drive ]]; then  # detached (setsid) by start: the two servers one after the other, within DRIVER_S
  END=$(( T0 + ${DRIVER_S:?} ))
  mkdir -p /root/autotune && cp "/root/repo/tests/gpu/h200-tune-moe-2026-11-30/$TUNED" /root/autotune/
  ls -la /root/autotune; sha256sum "/root/autotune/$TUNED"
  bench as-shipped-tuned $(( END - $(date +%s) < 1100 ? END - $(date +%s) : 1100 )) VLLM_TUNED_CONFIG_FOLDER=/root/autotune
  rest=$(( END - $(date +%s) ))
  if (( rest >= 360 )); then
    bench as-shipped-default $(( rest - 20 ))
  else
    echo "== $(date -u +%T) as-shipped-default not started: $rest s of the driver's time left (< 360)"
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
    df -h / | tail -1
    ;;
  start)
    unpack_once "$C/repo" || exit 3
    start=$(date +%s)
    jit_cache_lay "$STASH/jit-cache" || exit 4
    touch "$MARK"
    echo "== JIT caches laid down in $(( $(date +%s) - start )) s"
    rm -rf /root/repo "$WORK" && mkdir -p "$WORK/out" && cp -a "$C/repo" /root/repo
    # the driver runs from the copy (the checkout here is laid down again by every call)
    DRIVER_S=${DRIVER_S:?} setsid bash /root/repo/tests/gpu/h200-as-shipped-2026-12-03/run.sh drive "$C" \
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
