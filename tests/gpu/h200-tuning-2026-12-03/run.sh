#!/usr/bin/env bash
# The device call of 2026-12-03 (nvidia-h200, issue 37 item 2), from the checkout's root with carry [".whl/d1"]:
#   bash tests/gpu/h200-tuning-2026-12-03/run.sh .whl/d1 [BUDGET_S=130]
# The session had 325 s of device time when it began (not the 1,800 planned: report.md), too little for the three
# calls that carry vLLM's bundle and for one start of the full shape (~196 s to healthy), so this call measures
# the block-FP8 linears of the full shape kernel by kernel (linear_bench.py), with only the parts of vLLM 0.26.0
# those kernels need. On the workstation, before the call (.whl/ is ignored):
#   cat .whl/vllm/vllm-part-* | xz -dc | tar -C /tmp/bx -xf - site/vllm/_C_stable_libtorch.abi3.so \
#     site/vllm/model_executor/layers/quantization/utils/fp8_utils.py     # the bundle of tests/gpu/carry.sh vllm
#   xz -T2 -9e -c /tmp/bx/site/vllm/_C_stable_libtorch.abi3.so > .whl/d1/vllm_C.so.xz    # 68,127,784 -> 55,611,172 bytes
#   cp /tmp/bx/site/vllm/model_executor/layers/quantization/utils/fp8_utils.py .whl/d1/
#   (cd .whl/d1 && sha256sum * > SHA256SUMS)
# Everything lands in $OUT: device-d1.log, linear-bench.json. No GPU setting is changed.
set -uo pipefail
C=$(cd "${1:?the carried folder}" && pwd)
BUDGET=${2:-130}
T0=$(date +%s)
exec > >(tee "$OUT/device-d1.log") 2>&1
echo "== $(date -u +%FT%TZ) d1: $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu --format=csv,noheader)"
(cd "$C" && sha256sum -c SHA256SUMS) || exit 3
xz -T8 -dc "$C/vllm_C.so.xz" > /tmp/_C_stable_libtorch.abi3.so || exit 3
echo "== vLLM's _C unpacked in $(( $(date +%s) - T0 )) s: $(sha256sum /tmp/_C_stable_libtorch.abi3.so)"
PYTHONUNBUFFERED=1 timeout $(( BUDGET + 30 )) python3 tests/gpu/h200-tuning-2026-12-03/linear_bench.py "$OUT" \
  "$C/fp8_utils.py" /tmp/_C_stable_libtorch.abi3.so "$BUDGET"
echo "== linear_bench rc=$? in $(( $(date +%s) - T0 )) s"
ls -la "$OUT"
