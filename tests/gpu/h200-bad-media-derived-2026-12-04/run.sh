#!/usr/bin/env bash
# The device calls of 2026-12-04 (nvidia-h200, issue 39 item 2, the vLLM half) with vLLM 0.26.0 patched the way the
# image stage now patches a pulled image (issue 39 item 1, roles/image/tasks/derive.yml): the series of
# patches/vllm/series is laid out as derive.yml's build folder has it (each patch by name and apply_series.py, in
# /opt/gpuserve/patches/vllm, the folder the Dockerfile's COPY puts them in) and roles/image/files/apply_series.py is
# run with derive.yml's RUN argv (python3 apply_series.py --package vllm --version <the series' version> --dir
# /opt/gpuserve/patches/vllm <the series' patches>), the argv made from the collection's own patch_series filter
# (plugins/filter/engines.py; ansible.errors stood in for, as the machine has no ansible). vLLM here is the trimmed
# bundle unpacked at /root/vllm/site (PYTHONPATH), not an image's site-packages: apply_series.py finds the package
# through importlib.metadata either way. Around it: the patched files' SHA-256 before and after, against the hashes
# the installed distribution's RECORD gives them (the wheel's); the same argv with --version 0.25.0 first (refused,
# nothing written); the same argv a second time on the patched package (derive.yml never does this: every build
# starts FROM the pulled digest; what happens is recorded). Then every case of the bad-media catalogue
# (plugins/module_utils/bad_media.py) sent to the recipe's rendered command (llm_vision: true, llm_drafter off) on the
# burn-in GLM-4.6V folder, each followed by /health and a text chat: tests/gpu/serve_vision_glm.py's refusals mode,
# LABEL=derived, as h200-bad-media-0003-2026-12-03 ran it after the collection's apply_patches.
#
# On the workstation (.whl/ is ignored): bash tests/gpu/carry.sh vllm (2026-12-04, from PyPI), its parts moved into
#   .whl/e1/vllm {vllm-part-00, SHA256SUMS}   .whl/e2/vllm {vllm-part-01}   .whl/e3/vllm {vllm-part-02}
# Nothing else is carried: apply_series.py needs the standard library only, and patch_series is read from the checkout.
# The calls, from the checkout's root, back to back on one lease:
#   1: CALL=e1 bash tests/gpu/h200-bad-media-derived-2026-12-04/run.sh stash .whl/e1     carry [".whl/e1/vllm"], 120
#   2: CALL=e2 bash tests/gpu/h200-bad-media-derived-2026-12-04/run.sh stash .whl/e2     carry [".whl/e2/vllm"], 120
#   3: CALL=e3 CALL_S=N DEADLINE_MARGIN=M bash tests/gpu/h200-bad-media-derived-2026-12-04/run.sh derived .whl/e3
#                                                                                 carry [".whl/e3/vllm"], N + 10
# CALL_S: the seconds the call may use (the session's device time left, less the transfers). DEADLINE_MARGIN (40 unless
# set): how long before the guard's SIGINT the refusals mode stops taking catalogue cases and skips verify.
# What ran (2026-12-04, nvidia-h200, one lease, back to back; report.md), each as the run tool's command with its carry
# and timeout_s (366 s of the session's device time were left at the start):
#   e1: CALL=e1 bash tests/gpu/h200-bad-media-derived-2026-12-04/run.sh stash .whl/e1   carry [".whl/e1/vllm"], 120
#   e2: CALL=e2 bash tests/gpu/h200-bad-media-derived-2026-12-04/run.sh stash .whl/e2   carry [".whl/e2/vllm"], 120
#   e3: CALL=e3 CALL_S=245 DEADLINE_MARGIN=-25 bash tests/gpu/h200-bad-media-derived-2026-12-04/run.sh derived .whl/e3
#                                                            carry [".whl/e3/vllm"], 255 (271 s were left)
#   then two calls that tried to fetch what e3 left in $OUT and found none of it (report.md, "What did not come back"):
#   f1: f=$(find / -xdev -name refusals-derived.json -not -path '/proc/*' 2>/dev/null | head -1); echo "$f";
#       d=$(dirname "$f"); ls -la "$d"; tar -C "$d" -czf "$OUT/e3-out.tar.gz" . && ls -la "$OUT"     no carry, 40
#   f2: P=$(dirname "$OUT"); ls -la "$P"; f=$(find "$P" -maxdepth 3 -name refusals-derived.json 2>/dev/null | head -1);
#       echo "found: $f"; [ -n "$f" ] && tar -C "$(dirname "$f")" -czf "$OUT/e3-out.tar.gz" . && ls -la "$OUT"
#                                                                                                  no carry, 30
# $OUT: e3 left 16 files there and the run tool brings back 8 (/work/.library/device/README.md, Limits): the eight
# apply-series-twice.* and apply-series-wrong-version.* came back; refusals-derived.json, vllm-refusals-derived.log,
# hashes.tsv, derive-argv.json, apply-series.{stdout,stderr,rc} and device-e3.log did not, and the next call's $OUT
# (/root/out) starts empty. device-e3.log here is e3's stdout as the run tool returned it (the whole of it: 11,835
# characters, its tail's limit is 12,000), which is what the script's tee wrote to that log. A rerun should leave at
# most 8 files in $OUT (pack the rest into one).
# Nothing here changes a GPU setting. Every vLLM server is started in a session of its own by serve_vision_glm.py,
# which stops its process group; this script ends that group by its id if anything of it is left.
set -uo pipefail
MODE=${1:?usage: run.sh stash|derived CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
# shellcheck source=tests/gpu/device_lib.sh
source "$REPO/tests/gpu/device_lib.sh"
export PYTHONUNBUFFERED=1
# the files patches/vllm changes: 0001, 0002, 0003 (two)
PATCHED=(vllm/multimodal/video.py vllm/multimodal/media/image.py vllm/multimodal/media/connector.py
  vllm/multimodal/media/video.py)
IN_IMAGE=/opt/gpuserve/patches/vllm  # derive.yml's image_in_image for llm_engine vllm
PGID_FILE=${PGID_FILE:-/root/refusals.pgid}

serve() {  # LABEL: the refusals mode, stopped before the call's time is spent; then what is left of the server
  local label=$1 limit rc pgid
  limit=$(( $(left) - 15 ))
  echo "== $(date -u +%T) refusals $label: $limit s"
  rm -f "$PGID_FILE"
  guarded "$limit" env LABEL="$label" DEADLINE=$(( limit - ${DEADLINE_MARGIN:-40} )) PGID_FILE="$PGID_FILE" \
    PYTHONPATH="$VLLM_DEST/site" python3 "$REPO/tests/gpu/serve_vision_glm.py" "$OUT" refusals
  rc=$?
  echo "== $(date -u +%T) refusals $label rc=$rc"
  if [[ -f $PGID_FILE ]]; then
    pgid=$(cat "$PGID_FILE")
    if kill -0 -- "-$pgid" 2>/dev/null; then
      echo "== the server's group $pgid still there: killed"
      kill -KILL -- "-$pgid"
      sleep 3
    fi
  fi
  echo "== GPU memory used: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader)"
  return $rc
}

hashes() {  # STEP: each patched file's SHA-256, and whether it is the one the installed distribution's RECORD
  # (the wheel's) gives it; a line each in the log and in $OUT/hashes.tsv (step, file, sha256, RECORD's)
  python3 - "$VLLM_DEST/site" "$1" "${PATCHED[@]}" <<'EOF' | tee -a "$OUT/hashes.tsv" | sed 's/^/== /'
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

markers() {  # what each patch adds, present or not
  echo "== 0001 refuse_bottom_up_raw_avi in video.py: $(grep -c refuse_bottom_up_raw_avi "$VLLM_DEST/site/${PATCHED[0]}");" \
    "0002 DecompressionBombError in image.py: $(grep -c DecompressionBombError "$VLLM_DEST/site/${PATCHED[1]}");" \
    "0003 _DATA_URL_KINDS in connector.py: $(grep -c _DATA_URL_KINDS "$VLLM_DEST/site/${PATCHED[2]}");" \
    "0003 'holds no frame' in media/video.py: $(grep -c 'holds no frame' "$VLLM_DEST/site/${PATCHED[3]}")"
}

derive_layout() {  # derive.yml's build folder patches/ as COPY puts it in the image, and its RUN argv
  # (derive-argv.json: argv, the series' version, sha256 and patches, from patch_series itself)
  rm -rf "$IN_IMAGE" && mkdir -p "$IN_IMAGE"
  PYTHONPATH="$REPO/.collections" python3 - "$REPO" "$IN_IMAGE" "$OUT/derive-argv.json" <<'EOF'
import json, os, shutil, sys, types
repo, in_image, out = sys.argv[1:]
errors = types.ModuleType("ansible.errors")  # the machine has no ansible; patch_series raises only this
errors.AnsibleFilterError = type("AnsibleFilterError", (Exception,), {})
sys.modules["ansible"] = types.ModuleType("ansible")
sys.modules["ansible.errors"] = errors
from ansible_collections.gpuserve.llm.plugins.filter.engines import patch_series
series = patch_series(os.path.join(repo, "patches", "vllm"))  # image_patch_dir for llm_engine vllm
for p in series["patches"]:  # "Copy the patch series to the host": item.path -> patches/item.name
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

apply() {  # NAME ARG...: derive.yml's RUN argv, as it is or changed; its stdout, stderr, exit status and any finding
  local name=$1 rc finding
  shift
  env PYTHONPATH="$VLLM_DEST/site" "$@" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"
  rc=$?
  echo "$rc" > "$OUT/$name.rc"
  echo "== $name: rc=$rc; stdout:"
  cat "$OUT/$name.stdout"
  echo "== $name: stderr:"
  cat "$OUT/$name.stderr"
  finding=$(grep -o 'gpuserve-finding:[A-Za-z0-9+/=]*' "$OUT/$name.stdout" | head -1 | sed 's/^gpuserve-finding://')
  if [[ -n $finding ]]; then
    echo "$finding" | base64 -d > "$OUT/$name.finding.json"
    echo "== $name: the finding decoded: $(cat "$OUT/$name.finding.json")"
  fi
}

exec > >(tee "$OUT/device-$TAG.log") 2>&1
device_banner "$TAG"
case $MODE in
  stash)
    stash
    df -h / | tail -1
    ;;
  derived)
    stash
    if [[ ! -f $VLLM_DEST/site/vllm/__init__.py ]]; then
      start=$(date +%s)
      bash "$REPO/tests/gpu/unpack_vllm.sh" "$STASH" "$STASH" "$VLLM_DEST" || exit 3
      echo "== vLLM unpacked and imported in $(( $(date +%s) - start )) s"
    fi
    rm -f "$OUT/hashes.tsv"
    hashes unpacked
    mapfile -t ARGV < <(derive_layout)
    echo "== derive.yml's RUN argv: ${ARGV[*]}"
    ls -la "$IN_IMAGE"
    (( ${#ARGV[@]} > 7 )) || { echo "== no argv"; exit 4; }
    # the version check: the same argv for a series written for 0.25.0 (refused before any file is read)
    wrong=("${ARGV[@]}")
    wrong[5]=0.25.0
    apply apply-series-wrong-version "${wrong[@]}"
    hashes after-wrong-version
    apply apply-series "${ARGV[@]}"
    hashes after-apply
    markers
    # applied twice: the same argv on the package it has just patched
    apply apply-series-twice "${ARGV[@]}"
    hashes after-twice
    markers
    serve derived
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
