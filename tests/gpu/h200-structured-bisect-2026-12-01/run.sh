#!/usr/bin/env bash
# The device calls of 2026-12-01 (nvidia-h200, issue 27 item 2: the structured rows), back to back on one lease,
# each from the checkout's root with carry [".gpucarry/s27"]. On the workstation, before each call,
# .gpucarry/s27 (ignored) holds this script, vllm/ with one part of the vLLM bundle and, from call 3, repo/ (the files
# the script needs from this branch's tree: `git archive HEAD plugins templates roles inventories
# tests/gpu/bench_recipe_vs_defaults.py tests/gpu/unpack_vllm.sh .collections galaxy.yml`, 1.0 MB). The bundle:
# `CARRY_DIR=.gpucarry/bundle bash tests/gpu/carry.sh vllm` (two 60 MiB parts then), joined and split again in
# three (a 60 MiB part with the ~4 MB checkout was refused as over 64 MiB):
#   cat bundle/vllm/vllm-part-00 bundle/vllm/vllm-part-01 | split -b 42M -d -a 2 - bundle3/vllm-part-
#   (cd bundle3 && sha256sum vllm-part-* > SHA256SUMS)
# The calls (device time: 1,562 s of the session's 1,800, starts and transfers included):
#   call 1: CALL=call1 bash .gpucarry/s27/run.sh stash       vllm/: vllm-part-00, SHA256SUMS
#   call 2: CALL=call2 bash .gpucarry/s27/run.sh stash       vllm/: vllm-part-01
#   call 3: CALL=call3 bash .gpucarry/s27/run.sh servers \   vllm/: vllm-part-02, repo/ (unpacks)
#             "drop-other-half:recipe-no-mtp:240:$OTHER_HALF" "recipe-no-mtp:recipe-no-mtp:240:"
#   call 4: CALL=call4 bash .gpucarry/s27/run.sh servers "drop-reasoning-parser:recipe-no-mtp:230:--reasoning-parser" \
#             "defaults:defaults:230:" \
#             "drop-tools-xgrammar-gencfg:recipe-no-mtp:230:--enable-auto-tool-choice,--tool-call-parser,--structured-outputs-config,--override-generation-config"
#   call 5: CALL=call5 bash .gpucarry/s27/run.sh servers "recipe-no-mtp-2:recipe-no-mtp:220:" \
#             "drop-reasoning-parser-2:recipe-no-mtp:220:--reasoning-parser" "defaults-2:defaults:220:"
#   call 6: CALL=call6 bash .gpucarry/s27/run.sh servers "defaults-3:defaults:150:" \
#             "drop-reasoning-parser-3:recipe-no-mtp:150:--reasoning-parser" "recipe-no-mtp-3:recipe-no-mtp:150:" \
#             "drop-other-half-2:recipe-no-mtp:150:$OTHER_HALF"
#   with OTHER_HALF (written out in the calls) = --enable-auto-tool-choice,--tool-call-parser,--reasoning-parser,
#             --structured-outputs-config,--default-chat-template-kwargs,--override-generation-config
# SPEC = NAME:MODE:BUDGET_S:DROP (DROP: flags, comma-separated, taken out of the rendered recipe command with their
# values; empty for none). Every server: KINDS=prose,structured CONCURRENCY=1,4,16 REPEATS=3 (a warm-up pass at
# each row's shape first), no vllm bench serve, no prefill or reuse rows (SIDE= PREFILL= REUSE=0).
# Everything lands in $OUT: device-CALL.log, NAME.json, vllm-NAME.log. No GPU setting is changed.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
MODE=${1:?usage: run.sh stash | servers NAME:MODE:BUDGET_S:DROP ...}
shift
TAG=${CALL:-$MODE}
exec > >(tee "$OUT/device-$TAG.log") 2>&1
echo "== $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader)"
if [[ $MODE == stash ]]; then
  mkdir -p /root/stash && cp "$C"/vllm/vllm-part-* "$C"/vllm/SHA256SUMS /root/stash/ && ls -la /root/stash
  df -h / | tail -1
  exit 0
fi
if [[ ! -f /root/vllm/site/vllm/__init__.py ]]; then
  start=$(date +%s)
  bash "$C/repo/tests/gpu/unpack_vllm.sh" "$C/vllm" || exit 3
  echo "== vLLM unpacked and imported in $(( $(date +%s) - start )) s"
fi
cd "$C/repo" || exit 3
export KINDS=prose,structured CONCURRENCY=1,4,16 REPEATS=3 SIDE='' PREFILL='' REUSE=0 PYTHONUNBUFFERED=1
for spec in "$@"; do
  IFS=: read -r name mode budget drop <<<"$spec"
  start=$(date +%s)
  echo "== $(date -u +%T) $name: $mode, BUDGET_S=$budget, DROP=$drop"
  NAME=$name DROP=$drop BUDGET_S=$budget timeout $(( budget + 90 )) python3 tests/gpu/bench_recipe_vs_defaults.py \
    "$OUT" "$mode" /root/vllm/site
  echo "== $name rc=$? in $(( $(date +%s) - start )) s"
  nvidia-smi --query-gpu=memory.used,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
done
ls -la "$OUT"
