#!/usr/bin/env bash
# Build the collection tarball, install it with --no-deps into a temporary path (as an offline
# site would), and run a module and ansible-doc from the installed copy, not the checkout.
#   tests/testbed/package.sh VENV
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
VENV=$(cd "${1:?usage: package.sh VENV}" && pwd)
WORK=$(mktemp -d /tmp/gpuserve-package.XXXX)
trap 'rm -rf "$WORK"' EXIT
export PATH=$VENV/bin:$PATH

cd "$ROOT"
ansible-galaxy collection build --force --output-path "$WORK/dist" >/dev/null
TARBALL=$(ls "$WORK"/dist/gpuserve-llm-*.tar.gz)
SIZE_KIB=$(( $(stat -c %s "$TARBALL") / 1024 ))
echo "built $(basename "$TARBALL"): $(tar -tzf "$TARBALL" | wc -l) files, $SIZE_KIB KiB"
# What a working tree holds besides the collection (galaxy.yml's build_ignore): virtualenvs, the
# workstation's image and tuning cache (.gpuserve, also in molecule's scenario folders), a run's
# reports and logs, the real-GPU runs' result folders (tests/gpu/<machine>-<date>/), a downloaded wheel.
if tar -tzf "$TARBALL" | grep -E \
    '^(\.collections|\.work|\.venv[^/]*|\.whl|\.pytest_cache|tests/output|tests/gpu/[^/]+)/|(^|/)(\.gpuserve|reports|logs)/|\.whl$'; then
  echo "the tarball carries the paths above: galaxy.yml's build_ignore must keep them out" >&2; exit 1
fi
# 451 KiB measured on 2026-12-01 (a clean tree); 1 MiB leaves room to grow, and one cached image
# (the llama.cpp root made a 99 MB tarball) or a run's logs go far past it.
MAX_KIB=1024
if (( SIZE_KIB > MAX_KIB )); then
  echo "the tarball is $SIZE_KIB KiB, more than $MAX_KIB KiB: what is in it that the collection does not need?" >&2
  tar -tzvf "$TARBALL" | sort -k3 -n | tail -5 >&2
  exit 1
fi
cd "$WORK"  # no ansible.cfg here: only the installed copy can answer
export ANSIBLE_COLLECTIONS_PATH=$WORK/installed ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=0
ansible-galaxy collection install --no-deps -p "$WORK/installed" "$TARBALL" >/dev/null
ansible-doc gpuserve.llm.gpu_preflight | head -1
out=$(PYTHONPATH=$ROOT/tests/nvml_double NVML_REPLAY_SCENARIO=$ROOT/tests/fixtures/h200x2-nvml-probe.json \
  ansible localhost -c local -i localhost, -e "ansible_python_interpreter=$VENV/bin/python" \
  -m gpuserve.llm.gpu_preflight -a '{"gpus": [0, 1], "expected_power_w": 250}')
[[ -f $WORK/installed/ansible_collections/gpuserve/llm/MANIFEST.json ]] \
  || { echo "the collection was not installed under $WORK/installed" >&2; exit 1; }
echo "$out" | grep -cE "\"code\": \"W_POWER\"" | grep -qx 2 || { echo "$out" >&2; echo "module run from the tarball did not report W_POWER x2" >&2; exit 1; }
echo "module gpu_preflight from the installed tarball: W_POWER x2 on the replayed H200 reading"
