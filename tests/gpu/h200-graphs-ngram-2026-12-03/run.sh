#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 37 items 5 and 6), back to back on one lease, each from the
# checkout's root with carry [".whl/eN"]: CALL=eN bash tests/gpu/h200-graphs-ngram-2026-12-03/run.sh MODE .whl/eN
# Adapted from ../h200-engine-as-served-2026-12-02/run.sh (the engine users run: vLLM 0.26.0 + carry.sh engine,
# VLLM_DEEP_GEMM_WARMUP=skip). On the workstation, before the calls (.whl/ is ignored):
#   bash tests/gpu/carry.sh vllm engine          # vllm-part-00..02 (<= 40 MiB each), engine-part-00
#   .whl/e1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}   (hard links)
#   .whl/e2: vllm/ {vllm-part-01}
#   .whl/e3..e5: vllm/ {vllm-part-02} (e3 only), repo/ = `git archive HEAD` of the commit named in report.md (the
#     branch's tree as committed: the other session's uncommitted edits in the checkout stay out of the command)
# The calls as planned (the rows below: CONC, KINDS_ and CALL_S narrow them):
#   e1: CALL=e1 bash .../run.sh stash .whl/e1
#   e2: CALL=e2 bash .../run.sh stash .whl/e2
#   e3: CALL=e3 VLLM_DEEP_GEMM_WARMUP=skip bash .../run.sh seqs40 .whl/e3      unpack, then item 5's baseline: the
#       full GLM-4.6V-FP8 text shape (LAYERS=46) served by the recipe's command, MTP off, no 60 GiB KV cap, exactly as
#       h200-engine-as-served-2026-12-02 (so --max-num-seqs 40: CUDA graphs up to 80 tokens)
#   e4: CALL=e4 VLLM_DEEP_GEMM_WARMUP=skip bash .../run.sh capture512 .whl/e4  the same + --compilation-config
#       {"max_cudagraph_capture_size": 512}
#   e5: CALL=e5 VLLM_DEEP_GEMM_WARMUP=skip bash .../run.sh ngram .whl/e5       item 6: the example's drafter on
#       (bench mode `recipe`: llm_drafter ngram from inventories/example, rendered as --speculative-config
#       {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}), otherwise as e3
# What ran (report.md; .whl/e3..e5/repo: git archive of 7bf39b2), one lease, back to back:
#   e1, e2 as planned
#   e3:  as planned: not healthy in 406 s on the fresh machine (stopped during CUDA-graph capture, 7 of 13 sizes)
#   e3b: CALL=e3b VLLM_DEEP_GEMM_WARMUP=skip bash .../run.sh seqs40 .whl/e4        (vLLM already unpacked)
#   e4:  CONC=1,4 CALL=e4 VLLM_DEEP_GEMM_WARMUP=skip bash .../run.sh capture512 .whl/e4
#   e5:  CALL_S=345 KINDS_=prose CONC=1,16,40 CALL=e5 VLLM_DEEP_GEMM_WARMUP=skip bash .../run.sh ngram .whl/e5
#   (e4 and e5 ran this script with the CONC / KINDS_ / CALL_S variables put in by sed in the call's own command line,
#   since committed here as they ran.)
# Rows on every server (one server start a call): prose then structured at 1, 4, 16, 40 requests (256-token replies,
# greedy; prose ignore_eos, structured under the JSON schema), a warm-up pass at each row's shape then REPEATS=3 timed
# passes; then cold prompts of ~100 and ~300 tokens (PREFILL=100,300: one warm-up + 3 cold prompts each, 8 tokens out).
# No vllm bench serve, no reuse row (SIDE= REUSE=0). Rows left for time are listed in NAME.json's "skipped".
# Everything lands in $OUT: device-CALL.log, NAME.json, vllm-NAME.log. No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh stash|seqs40|capture512|ngram CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
exec > >(tee "$OUT/device-$TAG.log") 2>&1
echo "== $(date -u +%FT%TZ) $TAG: $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader)"
echo "== VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-unset}; left from an earlier call: $(find /root/stash -maxdepth 1 -printf '%f ' 2>/dev/null); vLLM processes: $(pgrep -fc 'vllm.entrypoints' || true); caches: $(du -sh /root/.cache/flashinfer /root/.cache/vllm /root/.deep_gemm 2>/dev/null | tr '\n\t' '  ')"
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
guarded() {  # LIMIT COMMAND...: in a process group of its own; SIGINT after LIMIT s (the script stops its vLLM server
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
left() { echo $(( ${CALL_S:-540} - $(date +%s) + T0 )); }  # seconds left of this call (600 less 40 s for the guard's kill,
  # or CALL_S less 40 s for a shorter call)
bench() {  # NAME BENCH_MODE [ENV=VALUE ...]: bench_recipe_vs_defaults.py with the row settings in the environment;
  # no new row starts after BUDGET_S (the call's time left less 50 s: a row in progress finishes)
  local name=$1 mode=$2 start limit budget
  shift 2
  start=$(date +%s)
  limit=$(left)
  budget=$(( limit - 50 ))
  echo "== $(date -u +%T) $name (BUDGET_S=$budget, stopped after $limit s) $*"
  guarded "$limit" env NAME="$name" BUDGET_S="$budget" LAYERS=46 KINDS="${KINDS_:-prose,structured}" CONCURRENCY="${CONC:-1,4,16,40}" \
    REPEATS=3 SIDE='' PREFILL=100,300 REUSE=0 HEALTH_TIMEOUT=$(( limit - 90 )) DROP=--kv-cache-memory-bytes "$@" \
    python3 tests/gpu/bench_recipe_vs_defaults.py "$OUT" "$mode" /root/vllm/site
  echo "== $name rc=$? in $(( $(date +%s) - start )) s"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  # what vLLM says it captured (the capture sizes and the largest), and the drafter's counters
  grep -o "'max_cudagraph_capture_size': [0-9]*\|'cudagraph_capture_sizes': \[[^]]*\]" "$OUT/vllm-$name.log" | sort -u
  grep -i "SpecDecoding metrics\|Graph capturing finished\|Capturing CUDA graphs" "$OUT/vllm-$name.log" | tail -4
}
case $MODE in
  seqs40) bench full-seqs40 recipe-no-mtp ;;
  capture512) bench full-seqs40-capture512 recipe-no-mtp ADD='["--compilation-config", "{\"max_cudagraph_capture_size\": 512}"]' ;;
  ngram) bench full-ngram recipe ;;
esac
ls -la "$OUT"
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
