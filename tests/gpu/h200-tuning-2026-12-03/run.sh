#!/usr/bin/env bash
# The device calls of 2026-12-03 (nvidia-h200, issue 37 item 2), each from the checkout's root on a fresh machine:
#   d1: bash tests/gpu/h200-tuning-2026-12-03/run.sh linear .whl/d1 130     carry [".whl/d1"]
#   d2: bash tests/gpu/h200-tuning-2026-12-03/run.sh moe .whl/d2 90         carry [".whl/d2"]
# (d1 ran with this script as of commit 1d136d6, before MODE existed: run.sh .whl/d1 130, the same steps.)
# The session had 325 s of device time when it began (not the 1,800 planned: report.md), too little for the three
# calls that carry vLLM's bundle and for one start of the full shape (~196 s to healthy), so these calls measure
# the full shape's block-FP8 linears (linear_bench.py) and routed experts (moe_bench.py) kernel by kernel, with only
# the parts of vLLM 0.26.0 those kernels need. On the workstation, before the calls (.whl/ is ignored), from the
# bundle of tests/gpu/carry.sh vllm:
#   U=site/vllm/model_executor/layers
#   cat .whl/vllm/vllm-part-* | xz -dc | tar -C /tmp/bx -xf - site/vllm/_C_stable_libtorch.abi3.so \
#     $U/quantization/utils/fp8_utils.py $U/fused_moe/fused_moe.py
#   xz -T2 -9e -c /tmp/bx/site/vllm/_C_stable_libtorch.abi3.so > .whl/d1/vllm_C.so.xz    # 68,127,784 -> 55,611,172 bytes
#   cp /tmp/bx/$U/quantization/utils/fp8_utils.py .whl/d1/; cp /tmp/bx/$U/fused_moe/fused_moe.py .whl/d2/
#   (cd .whl/d1 && sha256sum * > SHA256SUMS); (cd .whl/d2 && sha256sum * > SHA256SUMS)
# Everything lands in $OUT: device-dN.log, linear-bench.json / moe-bench.json. No GPU setting is changed.
set -uo pipefail
MODE=${1:?usage: run.sh linear|moe CARRIED [BUDGET_S]}
C=$(cd "${2:?the carried folder}" && pwd)
BUDGET=${3:-130}
TAG=d1
[[ $MODE == moe ]] && TAG=d2
T0=$(date +%s)
exec > >(tee "$OUT/device-$TAG.log") 2>&1
echo "== $(date -u +%FT%TZ) $TAG: $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader)"
(cd "$C" && sha256sum -c SHA256SUMS) || exit 3
if [[ $MODE == moe ]]; then
  PYTHONUNBUFFERED=1 timeout $(( BUDGET + 30 )) python3 tests/gpu/h200-tuning-2026-12-03/moe_bench.py "$OUT" \
    "$C/fused_moe.py" "$BUDGET"
  echo "== moe_bench rc=$? in $(( $(date +%s) - T0 )) s"
  ls -la "$OUT"
  exit 0
fi
xz -T8 -dc "$C/vllm_C.so.xz" > /tmp/_C_stable_libtorch.abi3.so || exit 3
echo "== vLLM's _C unpacked in $(( $(date +%s) - T0 )) s: $(sha256sum /tmp/_C_stable_libtorch.abi3.so)"
PYTHONUNBUFFERED=1 timeout $(( BUDGET + 30 )) python3 tests/gpu/h200-tuning-2026-12-03/linear_bench.py "$OUT" \
  "$C/fp8_utils.py" /tmp/_C_stable_libtorch.abi3.so "$BUDGET"
echo "== linear_bench rc=$? in $(( $(date +%s) - T0 )) s"
ls -la "$OUT"
