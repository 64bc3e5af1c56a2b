#!/usr/bin/env bash
# The test hosts' wheelhouse: requirements-host.txt's wheels for Debian 12's Python (3.11), with
# the pynvml TEST DOUBLE (nvml_replay) built from tests/nvml_double. Downloaded once; refreshed
# when requirements-host.txt or the double change. Prints the folder.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$ROOT/.work/wheelhouse
PY=${1:-python3}
STAMP=$(cat "$ROOT/requirements-host.txt" "$ROOT/tests/nvml_double/pynvml.py" | sha256sum | cut -c1-16)
if [[ -f $OUT/.stamp && $(cat "$OUT/.stamp") == "$STAMP" ]]; then echo "$OUT"; exit 0; fi
rm -rf "$OUT" && mkdir -p "$OUT"
"$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
  --python-version 3.11 --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux_2_28_x86_64 -r "$ROOT/requirements-host.txt" -d "$OUT" >&2
"$PY" "$ROOT/tests/nvml_double/build_wheel.py" "$OUT" >&2
echo "$STAMP" > "$OUT/.stamp"
echo "$OUT"
