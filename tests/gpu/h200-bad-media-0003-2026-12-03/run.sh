#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 39 item 2), after patch 0003 (commit 055e46f): the patched run of
# tests/gpu/h200-bad-media-2026-12-03 again, with patches/vllm/series now 0001 + 0002 + 0003, applied to vLLM 0.26.0 by
# the collection's apply_patches module; then every case of the bad-media catalogue (plugins/module_utils/bad_media.py)
# sent to the recipe's rendered command (llm_vision: true, llm_drafter off) on the burn-in GLM-4.6V folder, each
# followed by /health and a text chat: tests/gpu/serve_vision_glm.py's refusals mode, LABEL=patched. No unpatched run
# (that column is h200-bad-media-2026-12-03's).
#
# On the workstation (.whl/ is ignored; the same folders as h200-bad-media-2026-12-03, checked against SHA256SUMS):
#   .whl/e1/vllm {vllm-part-00, SHA256SUMS}   .whl/e2/vllm {vllm-part-01}   .whl/e3/vllm {vllm-part-02}
#   .whl/bm/ansible: ansible-core 2.19.14's ansible/__init__.py, release.py, _vendor/ and module_utils/ (1.6 MB)
# The calls, from the checkout's root, back to back on one lease (call 3 only where >= 230 s of device time are left):
#   1: CALL=e1 bash tests/gpu/h200-bad-media-0003-2026-12-03/run.sh stash .whl/e1      carry [".whl/e1/vllm"], 120
#   2: CALL=e2 bash tests/gpu/h200-bad-media-0003-2026-12-03/run.sh stash .whl/e2      carry [".whl/e2/vllm"], 120
#   3: CALL=e3 CALL_S=N DEADLINE_MARGIN=M bash tests/gpu/h200-bad-media-0003-2026-12-03/run.sh patched .whl/e3
#                                                                   carry [".whl/e3/vllm", ".whl/bm"], N + 10
# CALL_S: the seconds the call may use (the session's device time left, less the transfers). DEADLINE_MARGIN (40 unless
# set): how long before the guard's SIGINT the refusals mode stops taking catalogue cases and skips verify; 0 where
# little time is left (a first start on a fresh machine took 166 s to healthy on 2026-12-03, the cases ~15 s).
# What ran (one lease, back to back; report.md), each as the run tool's command with its carry and timeout_s:
#   e1: CALL=e1 bash tests/gpu/h200-bad-media-0003-2026-12-03/run.sh stash .whl/e1   carry [".whl/e1/vllm"], 120
#   e2: CALL=e2 bash tests/gpu/h200-bad-media-0003-2026-12-03/run.sh stash .whl/e2   carry [".whl/e2/vllm"], 120
#   e3: CALL=e3 CALL_S=242 DEADLINE_MARGIN=-25 bash tests/gpu/h200-bad-media-0003-2026-12-03/run.sh patched .whl/e3
#                                                   carry [".whl/e3/vllm", ".whl/bm"], 246 (256 s were left)
#   (DEADLINE_MARGIN was added between e2 and e3, when 256 s left meant a margin of 40 would have skipped the
#   catalogue: e1 and e2 ran the stash mode, which it does not touch.)
# Nothing here changes a GPU setting. Every vLLM server is started in a session of its own by serve_vision_glm.py,
# which stops its process group; this script ends that group by its id if anything of it is left.
set -uo pipefail
MODE=${1:?usage: run.sh stash|patched CARRIED}
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
ORIG=${ORIG:-/root/vllm-orig}
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

patched_files() {  # what each patch adds, present or not
  echo "== 0001 refuse_bottom_up_raw_avi in video.py: $(grep -c refuse_bottom_up_raw_avi "$VLLM_DEST/site/${PATCHED[0]}");" \
    "0002 DecompressionBombError in image.py: $(grep -c DecompressionBombError "$VLLM_DEST/site/${PATCHED[1]}");" \
    "0003 _DATA_URL_KINDS in connector.py: $(grep -c _DATA_URL_KINDS "$VLLM_DEST/site/${PATCHED[2]}");" \
    "0003 'holds no frame' in media/video.py: $(grep -c 'holds no frame' "$VLLM_DEST/site/${PATCHED[3]}")"
}

exec > >(tee "$OUT/device-$TAG.log") 2>&1
device_banner "$TAG"
case $MODE in
  stash)
    stash
    df -h / | tail -1
    ;;
  patched)
    stash
    if [[ ! -f $VLLM_DEST/site/vllm/__init__.py ]]; then
      start=$(date +%s)
      bash "$REPO/tests/gpu/unpack_vllm.sh" "$STASH" "$STASH" "$VLLM_DEST" || exit 3
      echo "== vLLM unpacked and imported in $(( $(date +%s) - start )) s"
    fi
    for f in "${PATCHED[@]}"; do
      mkdir -p "$ORIG/$(dirname "$f")" && cp "$VLLM_DEST/site/$f" "$ORIG/$f"
    done
    (cd "$ORIG" && sha256sum "${PATCHED[@]}")
    patches=$(sed -e 's/#.*//' -e '/^ *$/d' "$REPO/patches/vllm/series" | sed "s|^|$REPO/patches/vllm/|" |
      python3 -c 'import json, sys; print(json.dumps([l.strip() for l in sys.stdin]))')
    for check in true false; do
      echo "{\"ANSIBLE_MODULE_ARGS\": {\"path\": \"$VLLM_DEST/site\", \"patches\": $patches," \
        "\"_ansible_check_mode\": $check}}" > "$ORIG/apply-patches-args.json"
      name=apply-patches$([[ $check == true ]] && echo -check).json
      PYTHONPATH="$REPO/.whl/bm/ansible:$REPO/.collections" \
        python3 "$REPO/plugins/modules/apply_patches.py" "$ORIG/apply-patches-args.json" > "$OUT/$name"
      echo "== apply_patches (check mode $check) rc=$?: $(cat "$OUT/$name")"
    done
    (cd "$VLLM_DEST/site" && sha256sum "${PATCHED[@]}")
    patched_files
    serve patched
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
