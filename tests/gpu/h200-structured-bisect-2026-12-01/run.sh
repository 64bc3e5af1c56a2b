#!/usr/bin/env bash
# The device calls of 2026-12-01 (nvidia-h200, issue 27 item 2: the structured rows), back to back on one lease,
# each from the checkout's root with carry [".gpucarry/s27"]. On the workstation, before each call,
# .gpucarry/s27 (ignored) holds this script, repo/ (this branch's tree, `git archive`) and vllm/ with one part of
# `tests/gpu/carry.sh vllm` (a call carries 64 MiB):
#   call 1: bash .gpucarry/s27/run.sh stash                                   vllm/: vllm-part-00, SHA256SUMS
#   call 2: bash .gpucarry/s27/run.sh servers SPEC...                         vllm/: vllm-part-01, SHA256SUMS (unpacks)
#   call 3...: bash .gpucarry/s27/run.sh servers SPEC...                      (vLLM already in /root/vllm/site)
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
export KINDS=prose,structured CONCURRENCY=1,4,16 REPEATS=3 SIDE= PREFILL= REUSE=0 PYTHONUNBUFFERED=1
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
