#!/usr/bin/env bash
# The device calls of 2026-12-02 (nvidia-h200, issue 37 items 0, 1 and 5), back to back on one lease, each from the
# checkout's root with carry [".whl/cN"]: bash tests/gpu/h200-engine-as-served-2026-12-02/run.sh MODE .whl/cN
# On the workstation, before the calls (.whl/ is ignored):
#   bash tests/gpu/carry.sh vllm engine          # vllm-part-00..02 (<= 40 MiB each), engine-part-00 (5.5 MiB)
#   .whl/c1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}   (hard links)
#   .whl/c2: vllm/ {vllm-part-01}
#   .whl/c3..c5: vllm/ {vllm-part-02} (c3 only), repo/ = `git archive HEAD` of the commit named in report.md (the
#     branch's tree as committed: another session's uncommitted edits in the checkout stay out of the rendered command)
# The calls:
#   c1: CALL=c1 bash .../run.sh stash .whl/c1
#   c2: CALL=c2 bash .../run.sh stash .whl/c2
#   c3: CALL=c3 bash .../run.sh item5 .whl/c3      unpack (vLLM + engine), then the 8-layer burn-in folder served by
#       the recipe's command (MTP off) with and without --max-num-seqs 40 [and with it plus a 512-token CUDA-graph
#       capture size, if time is left]: prose and structured rows at 1 and 4 requests, warm-up + 3 passes (the
#       first server also compiles DeepGEMM's and flashinfer's kernels for these layer shapes, which the full shape
#       shares)
#   c4: CALL=c4 bash .../run.sh full .whl/c4       item 0: the full GLM-4.6V-FP8 text shape (46 layers), the same command
#       as h200-full-shape-2026-12-01 (MTP off, no 60 GiB KV cap), vLLM's own defaults: 1, 16, 40 requests, prefill
#   c5: CALL=c5 bash .../run.sh profile .whl/c5    item 1: tests/gpu/profile_step.py on the same command, eager and graphs
# What ran on 2026-12-02 (report.md): c1, c2 and c3 as above (c3's first server was not healthy in 400 s: DeepGEMM's
# start-up warm-up had compiled 901 of 1,108 kernels; nothing else ran in c3), then
#   c4:  VLLM_DEEP_GEMM_WARMUP=skip CALL=c4 bash .../run.sh full .whl/c4
#   c5:  VLLM_DEEP_GEMM_WARMUP=skip PHASES=eager HEALTH_TIMEOUT=260 CALL=c5 bash .../run.sh profile .whl/c5
#        (stopped on a bug of profile_step.py, fixed in .whl/c5/repo before c5b)
#   c5b: VLLM_DEEP_GEMM_WARMUP=skip PHASES=eager HEALTH_TIMEOUT=200 CALL=c5b bash .../run.sh profile .whl/c5
#   c6:  cp /root/profile-traces/eager/*.pt.trace.json.gz $OUT/   (then, here: profile_step.py OUT analyse TRACE...)
# .whl/c3..c5/repo: git archive of f31055c (c5/repo with the fixed profile_step.py of the next commit).
# Everything lands in $OUT: device-CALL.log, NAME.json, vllm-NAME.log, profile*.  No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|item5|full|profile CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
exec > >(tee "$OUT/device-$TAG.log") 2>&1
echo "== $(date -u +%FT%TZ) $TAG: $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader)"
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1
export PATH=$CUDA_HOME/bin:$PATH
stash() {
  mkdir -p /root/stash/engine
  [[ -d $C/vllm ]] && cp "$C"/vllm/* /root/stash/
  [[ -d $C/engine ]] && cp "$C"/engine/* /root/stash/engine/
  ls -la /root/stash /root/stash/engine
}
if [[ $MODE == stash ]]; then
  stash
  df -h / | tail -1
  exit 0
fi
if [[ ! -f /root/vllm/site/vllm/__init__.py ]]; then
  stash
  start=$(date +%s)
  ENGINE_DIR=/root/stash/engine bash "$C/repo/tests/gpu/unpack_vllm.sh" /root/stash || exit 3
  echo "== vLLM and the engine part unpacked and imported in $(( $(date +%s) - start )) s; nvcc: $(nvcc --version | tail -2 | head -1)"
fi
cd "$C/repo" || exit 3
guarded() {  # LIMIT COMMAND...: in a process group of its own; SIGINT after LIMIT s (the scripts stop their vLLM server
  # on it), then whatever of the group is left (a server not yet stopped) is killed by the group's id
  local limit=$1 pgid spid watchdog rc
  shift
  rm -f /tmp/guarded.pgid
  setsid --wait bash -c 'echo $$ > /tmp/guarded.pgid; exec "$@"' guarded "$@" &
  spid=$!
  sleep 1
  pgid=$(cat /tmp/guarded.pgid)
  ( sleep "$limit"; kill -INT -- "-$pgid" 2>/dev/null; sleep 40; kill -KILL -- "-$pgid" 2>/dev/null ) &
  watchdog=$!
  wait "$spid"
  rc=$?
  kill "$watchdog" 2>/dev/null
  kill -- "-$pgid" 2>/dev/null && echo "== killed what was left of process group $pgid" && sleep 5
  return $rc
}
left() { echo $(( 585 - $(date +%s) + T0 )); }  # seconds left of this call (a call may run 600)
bench() {  # NAME BUDGET_S [ENV=VALUE ...]: bench_recipe_vs_defaults.py recipe-no-mtp with the row settings in the environment
  local name=$1 budget=$2 start limit
  shift 2
  start=$(date +%s)
  limit=$(( budget + 120 < $(left) ? budget + 120 : $(left) ))
  echo "== $(date -u +%T) $name (BUDGET_S=$budget, stopped after $limit s) $*"
  guarded "$limit" env NAME="$name" BUDGET_S="$budget" "$@" python3 tests/gpu/bench_recipe_vs_defaults.py \
    "$OUT" recipe-no-mtp /root/vllm/site
  echo "== $name rc=$? in $(( $(date +%s) - start )) s"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
}
case $MODE in
  item5)
    export KINDS=prose,structured CONCURRENCY=1,4 REPEATS=3 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=400
    # A server of the 8-layer folder with compiled kernels: ~90 s to healthy, ~25 s of rows, ~5 s to stop.
    bench seqs40 400
    (( $(left) > 150 )) && bench no-seqs40 180 DROP=--max-num-seqs
    (( $(left) > 150 )) && bench seqs40-capture512 150 ADD='["--compilation-config", "{\"max_cudagraph_capture_size\": 512}"]'
    ;;
  full)
    bench full-shape-served 330 LAYERS=46 CONCURRENCY=1,16,40 KINDS=prose REPEATS=3 SIDE='' PREFILL=2048,8192,32768 \
      REUSE=0 HEALTH_TIMEOUT=420 DROP=--kv-cache-memory-bytes
    ;;
  profile)
    guarded "$(( $(left) - 45 ))" python3 tests/gpu/profile_step.py "$OUT" /root/vllm/site
    echo "== profile rc=$?"
    ;;
esac
ls -la "$OUT"
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
