#!/usr/bin/env bash
# The device call of 2026-12-01 (nvidia-h200), from the checkout's root, carry [".gpucarry"]:
#   bash .gpucarry/run.sh
# .gpucarry/repo is the branch's tree with .whl/ made by `bash tests/gpu/carry.sh preflight sglang`;
# .gpucarry/sglang-argv-landed.json is render_sglang_argv.py's output with main's templates/sglang.j2.
set -uo pipefail
C=$(cd "$(dirname "$0")" && pwd)
R=/tmp/results
mkdir -p "$R/preflight" "$R/sglang"
exec > >(tee "$R/device.log") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname) $(nproc) cores; $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
echo "== run_preflight.sh as landed in the branch, with carry.sh's preflight part"
start=$(date +%s)
timeout 170 bash "$C/repo/tests/gpu/run_preflight.sh" "$R/preflight"
echo "== run_preflight.sh rc=$? in $(( $(date +%s) - start )) s"
echo "== SGLang's parser: the carried wheels into /tmp/sglsite (first on PYTHONPATH)"
start=$(date +%s)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/sglsite "$C"/repo/.whl/sglang/*.whl
echo "== pip rc=$? in $(( $(date +%s) - start )) s"
start=$(date +%s)
PYTHONPATH=/tmp/sglsite PYTHONUNBUFFERED=1 timeout 130 python3 "$C/repo/tests/gpu/check_sglang_args.py" "$R/sglang" \
  "$C/sglang-argv-landed.json" "$C/repo/tests/gpu/sglang-argv.json"
echo "== check_sglang_args.py rc=$? in $(( $(date +%s) - start )) s"
PYTHONPATH=/tmp/sglsite python3 -c 'import sglang, transformers, torch, pydantic; print("versions:", sglang.__version__, transformers.__version__, torch.__version__, pydantic.__version__)'
cp "$R/preflight/summary.txt" "$OUT/preflight-summary.txt" 2>/dev/null
cp "$R"/sglang/*.txt "$R/sglang/check-sglang-args.json" "$OUT/" 2>/dev/null
tar -C "$R" -czf "$OUT/results.tgz" .
ls -la "$OUT"
