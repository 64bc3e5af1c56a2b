#!/usr/bin/env bash
# The device calls of 2026-12-01 (nvidia-h200, issue 27), back to back on one lease, each from the checkout's
# root with carry [".gpucarry/bench27"]. On the workstation, before each call, .gpucarry/bench27 (ignored) holds
# this script, repo/ (this branch's tree, `git archive`) and vllm/ with one part of `tests/gpu/carry.sh vllm`
# (a call carries 64 MiB):
#   call 1: bash .gpucarry/bench27/run.sh stash                      vllm/: vllm-part-00, SHA256SUMS
#   call 2: BUDGET_S=... bash .gpucarry/bench27/run.sh defaults      vllm/: vllm-part-01, SHA256SUMS (unpacks)
#   call 3: BUDGET_S=... bash .gpucarry/bench27/run.sh recipe-no-mtp
#   call 4: BUDGET_S=... bash .gpucarry/bench27/run.sh recipe-mtp
# (bench_recipe_vs_defaults.py's environment: REPEATS, REPLY, CONCURRENCY, KINDS, SIDE, BUDGET_S, DROP.)
# Everything lands in $OUT: device-MODE.log, MODE.json, vllm-MODE.log. No GPU setting is changed.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
MODE=${1:?usage: run.sh stash|defaults|recipe|recipe-no-mtp|recipe-mtp}
exec > >(tee "$OUT/device-$MODE${DROP:+-drop}.log") 2>&1
echo "== $(date -u +%FT%TZ) $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader)"
if [[ $MODE == stash ]]; then
  mkdir -p /root/stash && cp "$C"/vllm/vllm-part-* "$C"/vllm/SHA256SUMS /root/stash/ && ls -la /root/stash
  df -h / | tail -1
  python3 -c 'import torch, aiohttp, pandas; print("torch", torch.__version__, "aiohttp", aiohttp.__version__)'
  exit 0
fi
if [[ ! -f /root/vllm/site/vllm/__init__.py ]]; then
  start=$(date +%s)
  bash "$C/repo/tests/gpu/unpack_vllm.sh" "$C/vllm" || exit 3
  echo "== vLLM unpacked and imported in $(( $(date +%s) - start )) s"
fi
cd "$C/repo" || exit 3
start=$(date +%s)
PYTHONUNBUFFERED=1 timeout $(( ${BUDGET_S:-540} + 90 )) python3 tests/gpu/bench_recipe_vs_defaults.py "$OUT" "$MODE" \
  /root/vllm/site
echo "== bench_recipe_vs_defaults.py $MODE rc=$? in $(( $(date +%s) - start )) s"
nvidia-smi --query-gpu=memory.used --format=csv,noheader
ls -la "$OUT"
