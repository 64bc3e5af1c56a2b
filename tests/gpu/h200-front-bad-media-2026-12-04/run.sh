#!/usr/bin/env bash
# The device calls of 2026-12-04 (nvidia-h200), back to back on one lease, each from the checkout's root:
#   CALL=X bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh MODE CARRIED
#
# Task A (issue 39 item 2, the vLLM half through the front): vLLM 0.26.0 (the trimmed bundle, unpacked at
# /root/vllm/site) patched by roles/image/files/apply_series.py with roles/image/tasks/derive.yml's RUN argv, as
# h200-bad-media-derived-2026-12-04 ran it; then tests/gpu/front_vllm.py OUT bad-media: the recipe's rendered command
# with vision (the burn-in GLM-4.6V folder, llm_drafter off as the example now has it) on 127.0.0.1:18020 behind the
# front as the front role renders it (templates/front.conf.j2, front_auth.js, front_media.js, the vLLM profile's routes
# and media_per_request) in Debian's nginx 1.30.6 + njs from .debs (dpkg -x), and every case of the bad-media
# catalogue, with the front's own cases, through the front with a client key, each followed by /health and a text chat.
#
# Task B (issue 37 item 8): the GLM-4.5-Air text shape at full depth (46 layers + the MTP layer, FP8 block quant,
# --load-format dummy) with the engine users run (the engine part: flashinfer, DeepGEMM's headers; the JIT caches of
# .whl/jit-cache laid down first; VLLM_DEEP_GEMM_WARMUP=skip), the recipe's rendered command without the 60 GiB KV cap,
# MTP off and MTP on (1 draft token): bench_recipe_vs_defaults.py recipe-no-mtp / recipe-mtp, one request, prose,
# warm-up + 5 passes, greedy and at temperature 1.0, vLLM's draft counters over each row. Run by a driver in a session
# of its own (setsid) that outlives a call, followed over calls (as h200-step-after-2026-12-04/run.sh does).
#
# On the workstation (.whl/ is ignored), from `bash tests/gpu/carry.sh vllm engine front` (the vllm parts of
# 2026-12-04 08:31 and the engine part, checked against SHA256SUMS; the front's .debs made 2026-12-04 13:19) and
# .whl/jit-cache (jit_cache_pack's output of h200-step-after-2026-12-04), hard links:
#   .whl/f1: vllm/ {vllm-part-00, SHA256SUMS}, engine/ {engine-part-00, SHA256SUMS, versions}
#   .whl/f2: vllm/ {vllm-part-01}, jit-cache/ {jit-cache-part-00, SHA256SUMS, jit-cache-manifest}
#   .whl/f3: vllm/ {vllm-part-02}, front/ (the 11 .debs + SHA256SUMS)
# The calls (carry, timeout_s):
#   f1: CALL=f1 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh stash .whl/f1          [".whl/f1"], 120
#   f2: CALL=f2 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh stash .whl/f2          [".whl/f2"], 120
#   f3: CALL=f3 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh front .whl/f3          [".whl/f3"], 600
#   b1: CALL=b1 LEASE_LEFT=S bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh start .   no carry, 600
#       (LEASE_LEFT: the device seconds status gave before the call; the driver starts no step that would end later
#       than LEASE_LEFT - SPARE_S (90) from then)
#   b2...: CALL=bN bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh wait .              no carry
# What ran (2026-12-04, nvidia-h200; report.md, ../h200-air-mtp-2026-12-04/report.md), each the run tool's command with
# its carry and timeout_s:
#   lease 1 (1,800 s of device time at its start):
#   f1: CALL=f1 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh stash .whl/f1          [".whl/f1"], 120
#   f2: CALL=f2 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh stash .whl/f2          [".whl/f2"], 120
#   f3 (try 1): CALL=f3 bash .../run.sh front .whl/f3   [".whl/f3"], 600: applied the series (front-77efeda/apply-series/),
#       then "unknown mode bad-media": another session's git stash had taken the uncommitted front_vllm.py from the tree
#   f3 (try 2): cp tests/gpu/h200-front-bad-media-2026-12-04/front_vllm.py tests/gpu/front_vllm.py && CALL=f3 bash
#       .../run.sh front .whl/f3   [".whl/f3"], 600: apply_series.py refused the patched package (E_PATCH, nothing
#       written); since then this script skips the application when 0001's marker is there
#   f3: the same command as try 2 (the results: front-77efeda/); the copy laid over the machine's checkout was the
#       stash's front_vllm.py (the bad-media mode without the three front_media_urls lines), since removed here
#   b1: CALL=b1 LEASE_LEFT=1500 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh start .   no carry, 600
#   b2: SUFFIX=-2 CALL=b2 LEASE_LEFT=1080 SPARE_S=200 bash .../run.sh start .                     no carry, 600
#   give_back (739 s left)
#   lease 2 (a fresh machine, after dc1341f and d67657c changed front_media.js on main):
#   g1: CALL=g1 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh stash .whl/f1          [".whl/f1"], 120
#   g2: CALL=g2 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh stash .whl/f2          [".whl/f2"], 120
#   g3: sha256sum tests/gpu/front_vllm.py roles/front/files/front_media.js templates/front.conf.j2;
#       CALL=g3 bash tests/gpu/h200-front-bad-media-2026-12-04/run.sh front .whl/f3          [".whl/f3"], 600
#   give_back (525 s left)
# $OUT: at most 8 files a call (the run tool's limit): f3 leaves device-f3.log, front-bad-media.json/.md, front.conf,
# nginx-front.log, vllm-front.log and apply-series.tar.gz (the apply step's outputs, hashes.tsv, derive-argv.json);
# each follow of B leaves device-CALL.log, driver.log and results.tar.xz (the driver's JSON and vLLM's logs).
# Nothing here changes a GPU setting; every server is stopped by its process group's id.
set -uo pipefail
MODE=${1:?usage: run.sh stash|front|start|wait|drive CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
REPO=$(cd "$HERE/../../.." && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
WORK=${WORK:-/root/work}
# shellcheck source=tests/gpu/device_lib.sh
source "$HERE/../device_lib.sh"
export PYTHONUNBUFFERED=1
PATCHED=(vllm/multimodal/video.py vllm/multimodal/media/image.py vllm/multimodal/media/connector.py
  vllm/multimodal/media/video.py)
IN_IMAGE=/opt/gpuserve/patches/vllm  # derive.yml's image_in_image for llm_engine vllm

hashes() {  # STEP: each patched file's SHA-256 against the one the installed distribution's RECORD gives it
  python3 - "$VLLM_DEST/site" "$1" "${PATCHED[@]}" <<'EOF' | tee -a "$WORK/apply/hashes.tsv" | sed 's/^/== /'
import base64, csv, glob, hashlib, os, sys
site, step, files = sys.argv[1], sys.argv[2], sys.argv[3:]
record = {}
for path in glob.glob(os.path.join(site, "vllm-*.dist-info", "RECORD")):
    with open(path, newline="") as f:
        for row in csv.reader(f):
            if len(row) >= 2 and row[1].startswith("sha256="):
                record[row[0]] = base64.urlsafe_b64decode(row[1][7:] + "=" * (-len(row[1][7:]) % 4)).hex()
for name in files:
    with open(os.path.join(site, name), "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    print("%s\t%s\t%s\t%s" % (step, name, digest, "RECORD-same" if record.get(name) == digest
                                                 else "RECORD-differs:%s" % record.get(name, "none")))
EOF
}

derive_layout() {  # derive.yml's build folder patches/ as COPY puts it in the image, and its RUN argv (from
  # the collection's own patch_series filter; ansible.errors stood in for: the machine has no ansible)
  rm -rf "$IN_IMAGE" && mkdir -p "$IN_IMAGE"
  PYTHONPATH="$REPO/.collections" python3 - "$REPO" "$IN_IMAGE" "$WORK/apply/derive-argv.json" <<'EOF'
import json, os, shutil, sys, types
repo, in_image, out = sys.argv[1:]
errors = types.ModuleType("ansible.errors")
errors.AnsibleFilterError = type("AnsibleFilterError", (Exception,), {})
sys.modules["ansible"] = types.ModuleType("ansible")
sys.modules["ansible.errors"] = errors
from ansible_collections.gpuserve.llm.plugins.filter.engines import patch_series
series = patch_series(os.path.join(repo, "patches", "vllm"))
for p in series["patches"]:
    shutil.copy(p["path"], os.path.join(in_image, p["name"]))
shutil.copy(os.path.join(repo, "roles", "image", "files", "apply_series.py"), os.path.join(in_image, "apply_series.py"))
argv = ["python3", in_image + "/apply_series.py", "--package", "vllm", "--version", series["version"],
        "--dir", in_image] + [p["name"] for p in series["patches"]]
with open(out, "w") as f:
    json.dump({"argv": argv, "version": series["version"], "series_sha256": series["sha256"],
               "patches": series["patches"]}, f, indent=1)
print("\n".join(argv))
EOF
}

apply_series() {  # derive.yml's RUN argv; its stdout, stderr and exit status into $WORK/apply
  local rc
  env PYTHONPATH="$VLLM_DEST/site" "$@" > "$WORK/apply/apply-series.stdout" 2> "$WORK/apply/apply-series.stderr"
  rc=$?
  echo "$rc" > "$WORK/apply/apply-series.rc"
  echo "== apply-series: rc=$rc; stdout: $(cat "$WORK/apply/apply-series.stdout"); stderr: $(cat "$WORK/apply/apply-series.stderr")"
  return "$rc"
}

until_deadline() { echo $(( $(cat "$WORK/deadline") - $(date +%s) )); }

step() {  # NAME NEED LIMIT COMMAND...: COMMAND guarded for min(LIMIT, time to the deadline) s if NEED s are left
  local name=$1 need=$2 limit=$3 start left_s
  shift 3
  left_s=$(until_deadline)
  if (( left_s < need )); then
    echo "== $(date -u +%T) $name: not started ($left_s s to the deadline, needs $need)"
    return 0
  fi
  (( limit > left_s )) && limit=$left_s
  start=$(date +%s)
  echo "== $(date -u +%T) $name: started, stopped after $limit s"
  guarded "$limit" "$@"
  echo "== $(date -u +%T) $name rc=$? in $(( $(date +%s) - start )) s; caches: $(jit_cache_sizes)"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  grep -h "Selected .* for Fp8LinearMethod\|Graph capturing finished\|init engine\|speculative\|not torch-compiled\|Model loading took\|KV cache size" \
    "$WORK/out/vllm-$name.log" 2>/dev/null | cut -c1-260 | sort -u | tail -10
}

bench() {  # NAME MODE NEED LIMIT: one server start of bench_recipe_vs_defaults.py MODE at 46 layers, its rows, stopped
  local name=$1 mode=$2 need=$3 limit=$4
  step "$name" "$need" "$limit" env NAME="$name" BUDGET_S=$(( limit - 50 )) LAYERS=46 KINDS=prose CONCURRENCY=1 \
    REPEATS=5 SIDE='' PREFILL='' REUSE=0 HEALTH_TIMEOUT=$(( limit - 90 )) DROP=--kv-cache-memory-bytes \
    TEMPERATURES=0,1.0 VERIFY=0 python3 /root/repo/tests/gpu/bench_recipe_vs_defaults.py "$WORK/out" "$mode" \
    "$VLLM_DEST/site"
}

results() {  # everything the driver wrote, into $OUT (carriage returns made newlines)
  local f
  [[ -f $WORK/driver.log ]] && tr '\r' '\n' < "$WORK/driver.log" > "$OUT/driver.log"
  rm -rf /root/results && mkdir -p /root/results
  (cd "$WORK/out" 2>/dev/null && find . -type f) | while read -r f; do
    mkdir -p "/root/results/$(dirname "$f")"
    tr '\r' '\n' < "$WORK/out/$f" > "/root/results/$f"
  done
  tar -C /root/results -cf - . | xz -T0 -6 > "$OUT/results.tar.xz"
  ls -la "$OUT"
}

follow() {  # the driver's log as it grows, until the driver ends or this call's time is spent; then its files
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
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} VLLM_DEEP_GEMM_WARMUP=${VLLM_DEEP_GEMM_WARMUP:-skip}
  export PATH=$CUDA_HOME/bin:$PATH
  cd "$WORK" || exit 3
  echo "== $(date -u +%T) driver: $(until_deadline) s to the deadline"
  bench "air-no-mtp${SUFFIX:-}" recipe-no-mtp 200 330
  bench "air-mtp${SUFFIX:-}" recipe-mtp 250 560
  echo "== $(date -u +%T) driver done; $(until_deadline) s to the deadline"
  exit 0
fi

exec > >(tee "$OUT/device-$TAG.log") 2>&1
device_banner "$TAG"
case $MODE in
  stash)
    stash
    if [[ -d $C/jit-cache ]]; then mkdir -p "$STASH/jit-cache" && cp "$C"/jit-cache/* "$STASH/jit-cache/"; fi
    ls -la "$STASH/jit-cache" 2>/dev/null
    df -h / | tail -1
    ;;
  front)
    stash
    mkdir -p "$WORK/apply"
    if [[ ! -f $VLLM_DEST/site/vllm/__init__.py ]]; then
      start=$(date +%s)
      bash "$REPO/tests/gpu/unpack_vllm.sh" "$STASH" "$STASH" "$VLLM_DEST" || exit 3
      echo "== vLLM (trimmed: the engine part not laid) unpacked and imported in $(( $(date +%s) - start )) s"
    fi
    if grep -q refuse_bottom_up_raw_avi "$VLLM_DEST/site/${PATCHED[0]}"; then
      echo "== the series was applied by an earlier call of this lease (0001's marker is there): not again"
      hashes now
    else
      rm -f "$WORK/apply/hashes.tsv"
      hashes unpacked
      mapfile -t ARGV < <(derive_layout)
      echo "== derive.yml's RUN argv: ${ARGV[*]}"
      (( ${#ARGV[@]} > 7 )) || { echo "== no argv"; exit 4; }
      apply_series "${ARGV[@]}" || exit 4
      hashes after-apply
    fi
    echo "== markers: 0001 $(grep -c refuse_bottom_up_raw_avi "$VLLM_DEST/site/${PATCHED[0]}")," \
      "0002 $(grep -c DecompressionBombError "$VLLM_DEST/site/${PATCHED[1]}")," \
      "0003 $(grep -c _DATA_URL_KINDS "$VLLM_DEST/site/${PATCHED[2]}") / $(grep -c 'holds no frame' "$VLLM_DEST/site/${PATCHED[3]}")"
    tar -C "$WORK/apply" -czf "$OUT/apply-series.tar.gz" .
    limit=$(( $(left) - 10 ))
    echo "== $(date -u +%T) front_vllm.py bad-media: $limit s"
    guarded "$limit" env FRONT_DEBS="$C/front" VLLM_SITE="$VLLM_DEST/site" DEADLINE=$(( limit - 20 )) HEALTH_TIMEOUT=300 \
      python3 "$REPO/tests/gpu/front_vllm.py" "$OUT" bad-media
    echo "== front_vllm.py rc=$?; GPU memory used: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
    ls -la "$OUT"
    ;;
  start)
    # the engine part over the (patched) site, and the JIT caches, then the driver
    if [[ ! -d $VLLM_DEST/site/flashinfer ]]; then
      (cd "$STASH/engine" && sha256sum -c SHA256SUMS && cat engine-part-* | xz -dc | tar -C "$VLLM_DEST" -xf -) || exit 3
      env PYTHONPATH="$VLLM_DEST/site" PATH="/usr/local/cuda/bin:$PATH" python3 -c "
import shutil, flashinfer
from vllm.utils.deep_gemm import is_deep_gemm_supported
from vllm.utils.flashinfer import has_flashinfer, has_flashinfer_fp8_blockscale_gemm
print('== flashinfer', flashinfer.__version__, 'nvcc', shutil.which('nvcc'), 'has_flashinfer', has_flashinfer(),
      'fp8 blockscale sm90', has_flashinfer_fp8_blockscale_gemm(), 'deep_gemm supported', is_deep_gemm_supported())"
    fi
    jit_cache_lay "$STASH/jit-cache" || echo "== JIT caches not laid"
    rm -rf /root/repo "$WORK/out" && mkdir -p "$WORK/out" /root/repo &&
      tar -C "$REPO" --exclude=./.whl -cf - . | tar -C /root/repo -xf -
    echo $(( T0 + ${LEASE_LEFT:?the device seconds left as the call starts} - ${SPARE_S:-90} )) > "$WORK/deadline"
    echo "== deadline $(date -u -d "@$(cat "$WORK/deadline")" +%T) ($(until_deadline) s from now)"
    setsid bash /root/repo/tests/gpu/h200-front-bad-media-2026-12-04/run.sh drive /root/repo > "$WORK/driver.log" 2>&1 < /dev/null &
    echo $! > "$WORK/driver.pid"
    echo "== driver started, pid $(cat "$WORK/driver.pid")"
    follow
    ;;
  wait)
    follow
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
