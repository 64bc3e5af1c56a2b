#!/usr/bin/env bash
# The device calls of 2026-12-04 (nvidia-h200, issue 37 items 1/4 and 2), back to back on one lease, each from the
# checkout's root: CALL=gN bash tests/gpu/h200-step-after-2026-12-04/run.sh MODE CARRIED
# The engine users run (vLLM 0.26.0 + carry.sh engine, VLLM_DEEP_GEMM_WARMUP=skip; the full GLM-4.6V-FP8 text shape,
# 46 layers, random weights, the recipe's command as templates/vllm.j2 renders it now, MTP off, no drafter, without the
# 60 GiB KV cap), with the helpers in ../device_lib.sh. On the workstation (.whl/ is ignored):
#   bash tests/gpu/carry.sh vllm engine          # vllm-part-00..02 (<= 40 MiB each), engine-part-00
#   .whl/g1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}   (hard links)
#   .whl/g2: vllm/ {vllm-part-01}
#   .whl/g3: vllm/ {vllm-part-02}, repo/ = `git archive` of the commit named in report.md (this script as committed)
# The calls:
#   g1, g2: CALL=gN bash .../run.sh stash .whl/gN
#   g3: CALL=g3 LEASE_LEFT=S bash .../run.sh start .whl/g3   unpack, copy repo/ to /root/repo, start the driver (below)
#       in a session of its own (setsid: it outlives the call, not the lease), follow it until the call's time is spent.
#       LEASE_LEFT: the device seconds the session has left as g3 starts; the driver starts no step that would end
#       later than LEASE_LEFT - SPARE_S (240) from then.
#   g4...: CALL=gN bash .../run.sh wait .      follow the driver on until it ends or the call's time is spent
#   last:  CALL=gN bash .../run.sh collect .   the traces (two tars) and the JIT caches (jit_cache_pack) into $OUT
# Each follow leaves in $OUT: device-CALL.log, driver.log and results.tar.xz (everything the driver wrote but the
# traces: JSON, profile.md, vLLM's logs), carriage returns made newlines (a call brings back 8 files at most).
# The driver (each step one server start, stopped at its end; everything in /root/work):
#   1. render_recipe.py: the recipe's argv as rendered now (argv.json) and the burn-in folder at 46 layers
#   2. profile_step.py, phase eager (ARGV=argv.json, --kv-cache-memory-bytes dropped; the command + --enforce-eager),
#      default sampling and greedy, one request, STEP_TOKENS=64, a 1-s profiled window each, traces kept
#   3. profile_step.py, phase graphs (the command as rendered: torch.compile + CUDA graphs), the same, STEP_TOKENS=256,
#      a 0.5-s window each
#   4. bench_recipe_vs_defaults.py recipe-no-mtp + ADD --linear-backend deep_gemm (item 2's candidate: the one linear
#      kernel of vLLM 0.26.0 that quantises its input with a separate QuantFP8 op, which the default-on
#      fuse_norm_quant / fuse_act_quant passes can fuse into rms_norm / silu_and_mul): greedy prose, 1, 16, 40
#      requests, warm-up + 3 passes
#   5. bench_recipe_vs_defaults.py recipe-no-mtp, the recipe as rendered: the same rows on the same machine
#   After each server: which fused ops vLLM's torch.compile output holds (grep of ~/.cache/vllm/torch_compile_cache).
# What ran on 2026-12-04 (report.md), one lease, back to back, .whl/g3/repo = git archive of f2e8d56 (this script):
#   g1: CALL=g1 bash .../run.sh stash .whl/g1        g2: CALL=g2 bash .../run.sh stash .whl/g2
#   g3: CALL=g3 LEASE_LEFT=1755 bash .../run.sh start .whl/g3
#   g4: CALL=g4 bash .../run.sh wait .               g5: CALL=g5 CALL_S=330 bash .../run.sh wait .   (driver done)
#   g6 (bench 4 again on the machine's compiled kernels, its 1st start having stalled at 16 and 40; then collect):
#     export CUDA_HOME=/usr/local/cuda PATH=/usr/local/cuda/bin:$PATH PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=skip;
#     mkdir -p /root/work/out2; (cd /root/repo && NAME=full-deepgemm-again BUDGET_S=230 LAYERS=46 KINDS=prose
#     CONCURRENCY=1,16,40 REPEATS=3 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=200 DROP=--kv-cache-memory-bytes
#     TEMPERATURES=0 ADD='["--linear-backend", "deep_gemm"]' timeout -s INT 270 python3
#     tests/gpu/bench_recipe_vs_defaults.py /root/work/out2 recipe-no-mtp /root/vllm/site 2>&1 |
#     tee /root/work/out2/bench-again.log); sleep 3; echo "vLLM servers left: $(pgrep -c -f 'm vllm.entrypoints.cli.main')";
#     grep -h "Graph capturing finished\|init engine\|Selected" /root/work/out2/vllm-full-deepgemm-again.log | cut -c1-200;
#     CALL=g6 bash /root/repo/tests/gpu/h200-step-after-2026-12-04/run.sh collect /root/repo
#   (the count of vLLM servers left counts the command's own line, which holds the pattern)
# Then, here: floors.py on the four traces (report.md).
# No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|start|wait|collect|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=${WORK:-/root/work}
# shellcheck source=tests/gpu/device_lib.sh
source "$HERE/../device_lib.sh"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
export PATH=$CUDA_HOME/bin:$PATH
GPU=${GPU:-/root/repo/tests/gpu}

until_deadline() { echo $(( $(cat "$WORK/deadline") - $(date +%s) )); }

fused_ops() {  # NAME: which fused ops the torch.compile output written since NAME's start calls (vLLM's cache and
  # Inductor's; a start that took every compiled graph from the cache writes none)
  local files n op dirs=(/root/.cache/vllm/torch_compile_cache /tmp/torchinductor_root)
  [[ -n ${COMPILE_DIRS:-} ]] && read -ra dirs <<< "$COMPILE_DIRS"
  files=$(find "${dirs[@]}" -type f -newer "$WORK/marker-$1" 2>/dev/null)
  n=$(echo "$files" | grep -c . || true)
  echo -n "== $1: $n compiled files written;"
  for op in rms_norm_per_block_quant silu_and_mul_per_block_quant per_token_group_fp8_quant \
    dynamic_flashinfer_deepgemm_blockscale_gemm fp8_gemm_nt_op; do
    (( n )) && echo -n " $op $(echo "$files" | xargs -r grep -aho "$op" 2>/dev/null | wc -l)"
  done
  echo
}

step() {  # NAME NEED LIMIT COMMAND...: run COMMAND guarded for min(LIMIT, time to the deadline) s if NEED s are left
  local name=$1 need=$2 limit=$3 start left_s
  shift 3
  left_s=$(until_deadline)
  if (( left_s < need )); then
    echo "== $(date -u +%T) $name: not started ($left_s s to the deadline, needs $need)"
    return 0
  fi
  (( limit > left_s )) && limit=$left_s
  start=$(date +%s)
  touch "$WORK/marker-$name"
  echo "== $(date -u +%T) $name: started, stopped after $limit s"
  guarded "$limit" "$@"
  echo "== $(date -u +%T) $name rc=$? in $(( $(date +%s) - start )) s; caches: $(jit_cache_sizes)"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  fused_ops "$name"
}

bench() {  # NAME NEED LIMIT [ENV=VALUE ...]: one server start of bench mode recipe-no-mtp, its rows, the server stopped
  local name=$1 need=$2 limit=$3
  shift 3
  step "$name" "$need" "$limit" env NAME="$name" BUDGET_S=$(( limit - 60 )) LAYERS=46 KINDS=prose CONCURRENCY=1,16,40 \
    REPEATS=3 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=$(( limit - 100 )) DROP=--kv-cache-memory-bytes TEMPERATURES=0 \
    "$@" python3 "$GPU/bench_recipe_vs_defaults.py" "$WORK/out" recipe-no-mtp "$VLLM_DEST/site"
  grep -h "Enabled custom fusions\|Asynchronous scheduling\|Selected .* for Fp8LinearMethod\|Graph capturing finished\|init engine" \
    "$WORK/out/vllm-$name.log" 2>/dev/null | cut -c1-260 | sort -u | tail -8
}

profile() {  # PHASE NEED LIMIT [ENV=VALUE ...]: profile_step.py on the rendered argv, one phase
  local phase=$1 need=$2 limit=$3
  shift 3
  step "profile-$phase" "$need" "$limit" env ARGV="$WORK/argv.json" DROP=--kv-cache-memory-bytes PHASES="$phase" \
    SAMPLING=default,greedy KEEP_TRACE=1 HEALTH_TIMEOUT=$(( limit - 120 )) "$@" \
    python3 "$GPU/profile_step.py" "$WORK/out/$phase" "$VLLM_DEST/site"
  grep -h "Enabled custom fusions\|Asynchronous scheduling\|Selected .* for Fp8LinearMethod\|Graph capturing finished\|init engine" \
    "$WORK/out/$phase/vllm-profile-$phase.log" 2>/dev/null | cut -c1-260 | sort -u | tail -8
}

results() {  # everything the driver wrote but the traces, into $OUT (carriage returns made newlines)
  local f
  [[ -f $WORK/driver.log ]] && tr '\r' '\n' < "$WORK/driver.log" > "$OUT/driver.log"
  rm -rf /root/results && mkdir -p /root/results
  (cd "$WORK" && find . -type f ! -name '*.json.gz' ! -name driver.log ! -name driver.pid ! -name deadline ! -name 'marker-*') |
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
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline"
  python3 "$HERE/render_recipe.py" "$WORK/argv.json" "$VLLM_DEST/site" 2>&1 | tail -3
  [[ -s $WORK/argv.json ]] || { echo "== no argv rendered"; exit 3; }
  # a fresh machine: the eager start compiles flashinfer's kernels (~160 s on 2026-12-03), the graphs start
  # torch.compile and the capture of 51 sizes with DeepGEMM's compilations (~230 s)
  profile eager 420 720 STEP_TOKENS=64 WINDOW_S=1.0
  profile graphs 420 780 STEP_TOKENS=256 WINDOW_S=0.5
  bench full-deepgemm 330 700 ADD='["--linear-backend", "deep_gemm"]'
  bench full-recipe 220 420
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
    unpack_once "$C/repo" || exit 3
    [[ -d $C/jit-cache ]] && jit_cache_lay "$C/jit-cache"
    rm -rf /root/repo "$WORK" && mkdir -p "$WORK/out" && cp -a "$C/repo" /root/repo
    echo $(( T0 + ${LEASE_LEFT:?the device seconds left as the call starts} - ${SPARE_S:-240} )) > "$WORK/deadline"
    echo "== deadline $(date -u -d "@$(cat "$WORK/deadline")" +%T) ($(until_deadline) s from now)"
    # the driver runs from the copy (the checkout here is laid down again by every call)
    setsid bash /root/repo/tests/gpu/h200-step-after-2026-12-04/run.sh drive "$C" > "$WORK/driver.log" 2>&1 < /dev/null &
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
    fi
    for phase in eager graphs; do
      compgen -G "$WORK/out/$phase/*.json.gz" > /dev/null &&
        (cd "$WORK/out/$phase" && tar -cf "$OUT/traces-$phase.tar" ./*.json.gz)
    done
    results
    jit_cache_pack "$OUT" 15
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
