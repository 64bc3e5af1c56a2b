#!/usr/bin/env bash
# The device call of 2026-12-04 (nvidia-h200, issue 37 kernel work), from the checkout's root on a fresh machine,
# nothing carried (torch and Triton are the machine's own; vLLM is not needed):
#   bash tests/gpu/h200-splitk-gemv-2026-12-04/run.sh 210          (run tool: timeout_s 330)
# BUDGET_S (210) is the seconds splitk_bench.py gives its grid: the screen stops with 30 % of it left, the later
# stages at 20, 12 and 6 %. Everything lands in $OUT: device.log, splitk-bench.json. No GPU setting is changed.
# Before the call, on the workstation (CPU, Triton's interpreter; see report.md):
#   TRITON_INTERPRET=1 /tmp/gemv-venv/bin/python tests/gpu/h200-splitk-gemv-2026-12-04/splitk_bench.py /tmp/chk check
set -uo pipefail
BUDGET=${1:-210}
: "${OUT:?OUT: the folder the results go to}"
HERE=$(cd "$(dirname "$0")" && pwd)
T0=$(date +%s)
exec > >(tee "$OUT/device.log") 2>&1
Q=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,power.limit,temperature.gpu
echo "== $(date -u +%FT%TZ): $(nproc) cores, $(uname -r); $(nvidia-smi --query-gpu=$Q --format=csv,noheader)"
python3 -c 'import sys, torch, triton; print("== python", sys.version.split()[0], "torch", torch.__version__,
"cuda", torch.version.cuda, "triton", triton.__version__)'
PYTHONUNBUFFERED=1 timeout $(( BUDGET + 60 )) python3 "$HERE/splitk_bench.py" "$OUT" "$BUDGET"
echo "== splitk_bench rc=$? in $(( $(date +%s) - T0 )) s"
Q=clocks.sm,clocks.mem,power.draw,temperature.gpu,memory.used
echo "== $(date -u +%FT%TZ) after: $(nvidia-smi --query-gpu=$Q --format=csv,noheader)"
ls -la "$OUT"
sleep 1
