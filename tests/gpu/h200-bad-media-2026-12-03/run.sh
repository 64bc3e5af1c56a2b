#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 39 item 2): every case of the bad-media catalogue
# (plugins/module_utils/bad_media.py) sent to vLLM 0.26.0 serving the recipe's rendered command (llm_vision: true,
# llm_drafter off) on the burn-in GLM-4.6V folder (8 layers + the whole vision tower, random weights), each followed
# by /health and a text chat: tests/gpu/serve_vision_glm.py's refusals mode. First with patches/vllm (0001 + 0002)
# applied by the collection's apply_patches module, as 2026-12-01's calls 6-7 did; then, on the same machine and only
# where >= 300 s of the session's device time were left, with the two patched files put back (the before column).
#
# On the workstation (.whl/ is ignored; the vLLM parts as carry.sh vllm made them, checked against e1's SHA256SUMS):
#   .whl/e1/vllm {vllm-part-00, SHA256SUMS}   .whl/e2/vllm {vllm-part-01}   .whl/e3/vllm {vllm-part-02}
#   (.whl/e1/engine, the engine part, is not carried: the trimmed bundle is enough to serve this folder)
#   .whl/bm/ansible: ansible-core 2.19.14's ansible/__init__.py, release.py, _vendor/ and module_utils/ from the
#   workstation's .venv (1.3 MB): what AnsibleModule needs to run plugins/modules/apply_patches.py as a script
# The calls, from the checkout's root, back to back on one lease:
#   1: CALL=e1 bash tests/gpu/h200-bad-media-2026-12-03/run.sh stash .whl/e1        carry [".whl/e1/vllm"]
#   2: CALL=e2 bash tests/gpu/h200-bad-media-2026-12-03/run.sh stash .whl/e2        carry [".whl/e2/vllm"]
#   3: CALL=e3 CALL_S=N bash tests/gpu/h200-bad-media-2026-12-03/run.sh patched .whl/e3
#                                                                        carry [".whl/e3/vllm", ".whl/bm"]
#   4: CALL=e4 CALL_S=N bash tests/gpu/h200-bad-media-2026-12-03/run.sh unpatched .whl   (no carry)
# CALL_S: the seconds the call may use (the session's device time left, less the transfers).
# What ran (one lease, back to back; report.md), each as the run tool's command with its carry and timeout_s:
#   e1: CALL=e1 bash tests/gpu/h200-bad-media-2026-12-03/run.sh stash .whl/e1      carry [".whl/e1/vllm"], 120
#   e2: CALL=e2 bash tests/gpu/h200-bad-media-2026-12-03/run.sh stash .whl/e2      carry [".whl/e2/vllm"], 120
#   e3: CALL=e3 CALL_S=430 bash tests/gpu/h200-bad-media-2026-12-03/run.sh patched .whl/e3
#                                                             carry [".whl/e3/vllm", ".whl/bm"], 450 (725 s were left)
#   e4: CALL=e4 CALL_S=400 bash tests/gpu/h200-bad-media-2026-12-03/run.sh unpatched .whl     no carry, 420 (511 left)
# Nothing here changes a GPU setting. Every vLLM server is started in a session of its own by serve_vision_glm.py,
# which stops its process group; this script ends that group by its id if anything of it is left.
set -uo pipefail
MODE=${1:?usage: run.sh stash|patched|unpatched CARRIED}
C=$(cd "${2:?the carried folder}" && pwd)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
TAG=${CALL:-$MODE}
T0=$(date +%s)
# shellcheck source=tests/gpu/device_lib.sh
source "$REPO/tests/gpu/device_lib.sh"
export PYTHONUNBUFFERED=1
PATCHED=(vllm/multimodal/video.py vllm/multimodal/media/image.py)  # the files patches/vllm changes
ORIG=${ORIG:-/root/vllm-orig}
PGID_FILE=${PGID_FILE:-/root/refusals.pgid}

serve() {  # LABEL: the refusals mode, stopped before the call's time is spent; then what is left of the server
  local label=$1 limit rc pgid
  limit=$(( $(left) - 15 ))
  echo "== $(date -u +%T) refusals $label: $limit s"
  rm -f "$PGID_FILE"
  guarded "$limit" env LABEL="$label" DEADLINE=$(( limit - 40 )) PGID_FILE="$PGID_FILE" \
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
  echo "== refuse_bottom_up_raw_avi in video.py: $(grep -c refuse_bottom_up_raw_avi "$VLLM_DEST/site/${PATCHED[0]}");" \
    "DecompressionBombError in image.py: $(grep -c DecompressionBombError "$VLLM_DEST/site/${PATCHED[1]}")"
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
    patched_files
    serve patched
    ;;
  unpatched)
    for f in "${PATCHED[@]}"; do cp "$ORIG/$f" "$VLLM_DEST/site/$f"; done
    (cd "$VLLM_DEST/site" && sha256sum "${PATCHED[@]}")
    patched_files
    serve unpatched
    ;;
esac
echo "== $TAG done in $(( $(date +%s) - T0 )) s"
