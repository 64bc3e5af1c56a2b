# shellcheck shell=bash
# What the device runs' scripts share (sourced, on the GPU machine): carrying vLLM in parts over calls back to back,
# unpacking it once a lease, a guarded command, the call's time left, and the JIT caches a full-shape start compiles.
# Taken from h200-engine-as-served-2026-12-02/run.sh and h200-graphs-ngram-2026-12-03/run.sh, which keep their own
# copies (they are records). The sourcing script sets, or has device_args set from its arguments:
#   C   the carried folder of this call (absolute): vllm/ and engine/ parts (tests/gpu/carry.sh vllm engine), and
#       optionally repo/ (git archive of the commit measured) and jit-cache/ (jit_cache_pack's parts)
#   T0  the call's start (date +%s); CALL_S: the seconds a call may use (585 unless set)
# Nothing here changes a GPU setting.

STASH=${STASH:-/root/stash}
VLLM_DEST=${VLLM_DEST:-/root/vllm}

device_args() {  # MODE CARRIED, the run script's own arguments: MODE, C, SELF (the script), HERE, REPO, TAG (CALL
  # or MODE), T0 and WORK (/root/work unless set), which the driver functions below read
  MODE=${1:?usage: run.sh stash|start|wait|collect|drive CARRIED}
  C=$(cd "${2:?the carried folder}" && pwd)
  SELF=$(cd "$(dirname "${BASH_SOURCE[1]}")" && pwd)/$(basename "${BASH_SOURCE[1]}")
  HERE=$(dirname "$SELF")
  REPO=$(cd "$HERE/../../.." && pwd)
  TAG=${CALL:-$MODE}
  T0=$(date +%s)
  WORK=${WORK:-/root/work}
}

device_banner() {  # TAG: the machine, the GPU's state, and what an earlier call of this lease left
  echo "== $(date -u +%FT%TZ) $1: $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader)"
  echo "== VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-unset}; left from an earlier call: $(find "$STASH" -maxdepth 1 -printf '%f ' 2>/dev/null); vLLM processes: $(pgrep -fc 'vllm.entrypoints' || true); caches: $(jit_cache_sizes)"
}

stash() {  # copy this call's vLLM and engine parts to STASH (they stay there until the machine goes back)
  mkdir -p "$STASH/engine"
  [[ -d $C/vllm ]] && cp "$C"/vllm/* "$STASH/"
  [[ -d $C/engine ]] && cp "$C"/engine/* "$STASH/engine/"
  ls -la "$STASH" "$STASH/engine"
}

unpack_once() {  # REPO: vLLM and the engine part into VLLM_DEST/site, once a lease (unpack_vllm.sh checks and imports)
  local start
  [[ -f $VLLM_DEST/site/vllm/__init__.py ]] && return 0
  stash
  start=$(date +%s)
  ENGINE_DIR=$STASH/engine bash "$1/tests/gpu/unpack_vllm.sh" "$STASH" "$STASH" "$VLLM_DEST" || return 3
  echo "== vLLM and the engine part unpacked and imported in $(( $(date +%s) - start )) s; nvcc: $(nvcc --version | tail -2 | head -1)"
}

guarded() {  # LIMIT COMMAND...: in a process group of its own; SIGINT after LIMIT s (the bench scripts stop their vLLM
  # server on it), then whatever of the group is left (a server not yet stopped) is killed by the group's id
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

left() { echo $(( ${CALL_S:-585} - $(date +%s) + T0 )); }  # seconds left of this call (a call may run 600)

# The JIT caches of a start of the full shape with the engine part (flashinfer's JIT, vLLM's torch.compile cache,
# DeepGEMM's and Triton's kernels): ~400 s of a first start on a fresh machine (h200-graphs-ngram-2026-12-03).
# (vLLM 0.26.0 keeps DeepGEMM's under /root/.cache/vllm/deep_gemm; Inductor's own, with its Triton kernels, in
# /tmp/torchinductor_root.)
JIT_CACHE_DIRS=(/root/.cache/flashinfer /root/.cache/vllm /root/.triton /root/.deep_gemm /root/.cache/deep_gemm
  /root/.nv/ComputeCache /tmp/torchinductor_root)

jit_cache_sizes() {
  du -sh "${JIT_CACHE_DIRS[@]}" 2>/dev/null | tr '\n\t' '  '
}

jit_cache_pack() {  # DEST MAX_MIB: the caches present, tar | xz, in parts of 15 MiB + SHA256SUMS + manifest in DEST;
  # nothing when the packed caches exceed MAX_MIB (the $OUT of a call takes 64 MiB, 8 files)
  local dest=$1 max=$2 present=() d size
  for d in "${JIT_CACHE_DIRS[@]}"; do [[ -d $d ]] && present+=("${d#/}"); done
  (( ${#present[@]} )) || { echo "== no JIT cache to pack"; return 1; }
  tar -C / -cf - "${present[@]}" | xz -T0 -6 > /root/jit-cache.tar.xz
  size=$(stat -c %s /root/jit-cache.tar.xz)
  echo "== JIT caches ${present[*]}: $(jit_cache_sizes)-> $size bytes packed"
  if (( size > max * 1048576 )); then
    echo "== over $max MiB: not packed"
    return 1
  fi
  mkdir -p "$dest"
  split -b 15M -d /root/jit-cache.tar.xz "$dest/jit-cache-part-"
  (cd "$dest" && sha256sum jit-cache-part-* > SHA256SUMS)
  { echo "packed $(date -u +%FT%TZ) on $(uname -r), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
    du -s --block-size=1 "${present[@]/#//}"
    find "${present[@]/#//}" -type f | sed -n '1,400p'; } > "$dest/jit-cache-manifest"
  ls -la "$dest"
}

jit_cache_lay() {  # DIR: lay the caches that jit_cache_pack made (parts in DIR, and any other *.tar.xz of paths
  # under /, such as 2026-12-03's inductor-cache.tar.xz) back where they were, before a start
  local t
  [[ -f $1/SHA256SUMS ]] || return 0
  (cd "$1" && sha256sum -c --quiet SHA256SUMS) || return 1
  if compgen -G "$1/jit-cache-part-*" > /dev/null; then cat "$1"/jit-cache-part-* | xz -dc | tar -C / -xf - || return 1; fi
  for t in "$1"/*.tar.xz; do
    [[ -f $t ]] && { tar -C / -xJf "$t" || return 1; }
  done
  echo "== JIT caches laid down from $1: $(jit_cache_sizes)"
}

# The driver runs of 2026-12-04 on (h200-splitk-serve-2026-12-04/run.sh keeps its own copy, a record): a driver in a
# session of its own (setsid: it outlives the call, not the lease) writes everything into WORK; each call follows it.
# The sourcing script also sets WORK, MODE, TAG, REPO and SELF (its own path in the checkout).
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

# The patched engine's runs of 2026-12-05 on (h200-gemv-tune-, h200-gemv-serve-2026-12-05/run.sh keep their own
# copies, records): vLLM with the engine part, patches/vllm's split-K GEMV applied by the image stage's applier, and
# one server start of bench_recipe_vs_defaults.py recipe-no-mtp on the full GLM-4.6V-FP8 text shape a bench.
engine_env() {  # the engine as served (CUDA's nvcc for flashinfer's JIT, DeepGEMM's warm-up at first use); SITE,
  # TARGET (the file patch 0004 changes), PATCH_DIR and PATCH (patches/vllm's 0004 unless set)
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} PYTHONUNBUFFERED=1 VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
  export PATH=$CUDA_HOME/bin:$PATH
  SITE=$VLLM_DEST/site
  TARGET=vllm/model_executor/kernels/linear/scaled_mm/flashinfer.py
  PATCH_DIR=${PATCH_DIR:-$REPO/patches/vllm}
  PATCH=${PATCH:-0004-splitk-gemv-one-token.patch}
}

bench() {  # NAME NEED LIMIT: one server start of bench mode recipe-no-mtp (CONC: its rows, 1,16,40 unless set; ADD:
  # flags added, JSON; LAYERS: 46, the full shape, unless set), greedy prose, 5 timed passes a row; the server
  # stopped; what vLLM selected and logged
  local name=$1 need=$2 limit=$3
  echo "== $name: $TARGET sha256 $(sha256sum "$SITE/$TARGET" | cut -c1-16); GPUSERVE_GEMV_CONFIGS=${GPUSERVE_GEMV_CONFIGS:-}; ADD=${ADD:-}"
  step "$name" "$need" "$limit" env NAME="$name" BUDGET_S=$(( limit - 50 )) LAYERS="${LAYERS:-46}" KINDS=prose \
    CONCURRENCY="${CONC:-1,16,40}" REPEATS=5 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=$(( limit - 90 )) \
    DROP=--kv-cache-memory-bytes TEMPERATURES=0 ADD="${ADD:-}" \
    python3 /root/repo/tests/gpu/bench_recipe_vs_defaults.py "$WORK/out" recipe-no-mtp "$SITE" || return 1
  grep -h "Selected .* for Fp8LinearMethod\|gpuserve.llm\|[Bb]ackend\|Graph capturing finished\|Asynchronous scheduling\|init engine\|KV cache\|Traceback\|Error" \
    "$WORK/out/vllm-$name.log" 2>/dev/null | cut -c1-400 | awk '!seen[$0]++' | tail -40
}

designed_mtp() {  # NAME NEED LIMIT LAYERS ARMS: mtp_fraction.py's ARMS on GLM-4.5-Air's hand-set block-FP8 weights at
  # LAYERS (0: the full depth), served by the recipe's command without the KV cap; one request, greedy prose, 5 timed
  # passes; the arms' budget the step's limit (at most the time to the deadline) less 45 s, no arm begun with < 200 s
  local name=$1 need=$2 limit=$3 layers=$4 arms=$5 left_s
  left_s=$(until_deadline)
  (( limit > left_s )) && limit=$left_s
  step "$name" "$need" "$limit" env DESIGNED_LAYERS="$layers" DESIGNED_FP8=1 DROP=--kv-cache-memory-bytes \
    CONCURRENCY=1 KINDS=prose REPEATS=5 BUDGET_S=$(( limit - 45 )) ARM_MIN_S=200 \
    python3 /root/repo/tests/gpu/mtp_fraction.py "$WORK/out" "$arms" "$SITE"
}

patch_on() {  # N: the image stage's applier on the unpacked bundle, its log as apply-series-N.log
  (cd /root && PYTHONPATH=$SITE python3 /root/repo/roles/image/files/apply_series.py --package vllm --version 0.26.0 \
    --dir "$PATCH_DIR" "$PATCH") > "$WORK/out/apply-series-$1.log" 2>&1
  echo "== $(date -u +%T) apply_series rc=$? ($(tr '\n' ' ' < "$WORK/out/apply-series-$1.log" | cut -c1-300));" \
    "$TARGET sha256 $(sha256sum "$SITE/$TARGET" | cut -c1-16)"
}

results() {  # everything the driver wrote, into $OUT (carriage returns made newlines in text files)
  local f
  [[ -f $WORK/driver.log ]] && tr '\r' '\n' < "$WORK/driver.log" > "$OUT/driver.log"
  rm -rf /root/results && mkdir -p /root/results
  (cd "$WORK" && find . -type f ! -name driver.log ! -name driver.pid ! -name deadline) |
    while read -r f; do
      mkdir -p "/root/results/$(dirname "$f")"
      if grep -qI '' "$WORK/$f"; then  # text (progress bars' carriage returns made newlines)
        tr '\r' '\n' < "$WORK/$f" > "/root/results/$f"
      else  # binary or empty (profile_step.py's gzip traces): as it is
        cp "$WORK/$f" "/root/results/$f"
      fi
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

run_mode() {  # the calls' modes: stash, start (unpack, copy the checkout, start SELF's drive mode), wait, collect
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
      setsid bash "/root/repo/${SELF#"$REPO"/}" drive "$C" > "$WORK/driver.log" 2>&1 < /dev/null &
      echo $! > "$WORK/driver.pid"
      echo "== driver started, pid $(cat "$WORK/driver.pid")"
      follow
      ;;
    wait)
      follow
      ;;
    collect)
      local pid
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
}
