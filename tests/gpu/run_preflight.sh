#!/usr/bin/env bash
# The preflight play for real on this machine's NVIDIA GPUs (connection: local), as on a GPU host.
# Made for the lent H200 machines (no registry there): first, where PyPI is reachable,
# `bash tests/gpu/carry.sh preflight` puts into .whl/ (CARRY_DIR) ansible-core and its missing
# dependencies (ansible/), community.docker (collections/: the preflight role asks Docker first
# through it) and every pin of requirements-host.txt (host/: the host_venv role installs them all
# from that wheelhouse, --no-index); then the device call carries that folder.
#
#   bash tests/gpu/run_preflight.sh [OUTDIR]
#
# Runs: the recipe's checks (250 W expected), a rerun (must change nothing), --check on a fresh
# virtualenv path (must change nothing), GPU 0 held by another process, preflight_min_free_mib
# above what is free, and the GPU module alone. Writes run.log, summary.txt and each run's
# preflight.json to OUTDIR. Never changes a GPU setting.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:-${OUT:-/tmp/gpu-preflight-out}}
WORK=$(mktemp -d /tmp/gpuserve-gpu-test.XXXX)
mkdir -p "$OUT"
LOG=$OUT/run.log
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
exec > >(tee -a "$LOG") 2>&1

say() { echo "$*" | tee -a "$SUMMARY"; }

CARRY=${CARRY_DIR:-$REPO/.whl}
if ls "$CARRY"/ansible/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
    "$CARRY"/ansible/*.whl || exit 1
  export PYTHONPATH=$WORK/site
  PLAYBOOK=("$(command -v python3)" "$WORK/site/bin/ansible-playbook")
  ADHOC=("$(command -v python3)" "$WORK/site/bin/ansible")
else
  PLAYBOOK=(ansible-playbook)
  ADHOC=(ansible)
fi
export ANSIBLE_CONFIG=$REPO/ansible.cfg ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=0
# This collection, then community.docker (carried, or the controller's own `ansible` package's).
export ANSIBLE_COLLECTIONS_PATH=$REPO/.collections:$CARRY/collections${ANSIBLE_COLLECTIONS_PATH:+:$ANSIBLE_COLLECTIONS_PATH}
WHEELHOUSE=${GPU_TEST_WHEELHOUSE:-$CARRY/host}
# What host_venv installs: every pin of requirements-host.txt, as its defaults say.
PACKAGES=${GPU_TEST_PACKAGES:-$(grep -vE '^\s*(#|$)' "$REPO/requirements-host.txt" | paste -sd, -)}
DOCKER_COLLECTION=""
for path in ${ANSIBLE_COLLECTIONS_PATH//:/ }; do
  [[ -d $path/ansible_collections/community/docker ]] && DOCKER_COLLECTION=$path && break
done
if [[ -n $WHEELHOUSE && ! -d $WHEELHOUSE ]] || [[ -z $DOCKER_COLLECTION ]]; then
  echo "the host wheelhouse ($WHEELHOUSE) or community.docker is missing: bash tests/gpu/carry.sh preflight" >&2
  exit 2
fi

say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "host: $(uname -r), $(nproc) cores, python $(python3 -V 2>&1 | cut -d' ' -f2)"
DOCKER_VERSION=$(sed -n 's/^ *"version": "\(.*\)",$/\1/p' \
  "$DOCKER_COLLECTION/ansible_collections/community/docker/MANIFEST.json" | head -1)
say "ansible: $("${ADHOC[@]}" --version | head -1); community.docker $DOCKER_VERSION from $DOCKER_COLLECTION"
say "host wheelhouse: $(find "$WHEELHOUSE" -name '*.whl' 2>/dev/null | wc -l) wheels for $(echo "$PACKAGES" | tr , '\n' | wc -l) pins"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi -L | sed 's/(UUID.*)//' | tee -a "$SUMMARY"
  nvidia-smi --query-gpu=index,driver_version,power.limit,memory.free --format=csv | tee -a "$SUMMARY"
  nvidia-smi topo -p2p r | sed 's/\x1b\[[0-9;]*m//g' | head -12 | tee -a "$SUMMARY"
fi
COUNT=$(python3 -c 'import pynvml as n; n.nvmlInit(); print(n.nvmlDeviceGetCount())' 2>/dev/null || echo 2)
GPUS="[$(seq -s, 0 $((COUNT - 1)))]"
say "GPUs under test: $GPUS"

inventory() {  # inventory VENV [extra yaml lines]
  cat > "$WORK/hosts.yml" <<EOF
llm_hosts:
  hosts:
    $(hostname -s 2>/dev/null || echo gpuhost):
      ansible_connection: local
      ansible_python_interpreter: $(command -v python3)
      host_venv_path: $1
      host_venv_wheelhouse: $WHEELHOUSE
      host_venv_wheelhouse_dest: $WORK/wheelhouse
      host_venv_packages: [$PACKAGES]
      llm_gpus: $GPUS
      preflight_expected_power_w: 250
      preflight_min_free_mib: ${2:-90000}
EOF
}

play() {  # play NAME [ansible-playbook args]: run, time, keep its report, print its codes
  local name=$1 start end rc
  shift
  echo "===== $name"
  start=$(date +%s.%N)
  (cd "$WORK" && "${PLAYBOOK[@]}" "$REPO/site.yml" -i "$WORK/hosts.yml" --tags preflight "$@")
  rc=$?
  end=$(date +%s.%N)
  cp "$WORK/reports/preflight.json" "$OUT/preflight-$name.json" 2>/dev/null
  say "$(printf '%-22s rc=%s  play %.1f s  %s' "$name" "$rc" "$(python3 -c "print($end - $start)")" "$(python3 - "$WORK/reports/preflight.json" <<'EOF'
import json, sys
hosts = json.load(open(sys.argv[1]))["hosts"]
for h in hosts.values():
    f = h["findings"]
    codes = sorted("%s(%s)" % (x["code"], x["subject"]) for x in f)
    p2p = " ".join("%s:%s" % (p["pair"], p["peer_access"]) for p in h["facts"].get("p2p", []))
    print("findings: %s | p2p: %s | NVML read %ss" % (", ".join(codes) or "none", p2p or "-", h["facts"].get("gpu_check_seconds")))
EOF
)")"
  grep -E "^\S+\s+: ok=" "$LOG" | tail -2 | tee -a "$SUMMARY" >/dev/null
}

VENV=$WORK/venv
inventory "$VENV"
play recipe-first-run
play recipe-rerun

inventory "$WORK/fresh-venv"
play check-mode --check
say "check mode left the fresh venv path: $([[ -e $WORK/fresh-venv ]] && echo PRESENT || echo absent)"

inventory "$VENV"
HOLDER=""
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  rm -f "$WORK/held"
  setsid python3 -c "
import time, torch
x = torch.empty(10 * 2**30, dtype=torch.uint8, device='cuda:0')
open('$WORK/held', 'w').write('held')
time.sleep(300)" &
  HOLDER=$!
  for _ in $(seq 60); do [[ -f $WORK/held ]] && break; sleep 0.5; done
  say "holder pid $HOLDER holds 10 GiB on GPU 0: $(cat "$WORK/held" 2>/dev/null || echo NOT READY)"
  play gpu0-busy
  kill "$HOLDER" 2>/dev/null
  wait "$HOLDER" 2>/dev/null
else
  say "no torch with CUDA here: the busy run is skipped"
fi

inventory "$VENV" 200000
play min-free-200000

echo "===== module alone"
start=$(date +%s.%N)
(cd "$WORK" && "${ADHOC[@]}" localhost -c local -i localhost, -e ansible_python_interpreter="$VENV/bin/python" \
   -m gpuserve.llm.gpu_preflight -a "{\"gpus\": $GPUS, \"expected_power_w\": 250}" > "$WORK/module.out")
rc=$?
end=$(date +%s.%N)
say "$(printf 'module alone: rc=%s  ansible ad-hoc %.2f s, NVML read %s s' "$rc" "$(python3 -c "print($end - $start)")" \
  "$(grep -oE 'elapsed_s"?: [0-9.]+' "$WORK/module.out" | awk '{print $NF}')")"
cat "$WORK/module.out"

echo "===== the binding's READ constant"
"$VENV/bin/python" - <<'EOF' | tee -a "$SUMMARY"
import pynvml as n
n.nvmlInit()
if n.nvmlDeviceGetCount() > 1:
    a, b = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
    try:
        print("READ with the binding's constant %r: %s" % (n.NVML_P2P_CAPS_INDEX_READ, n.nvmlDeviceGetP2PStatus(a, b, n.NVML_P2P_CAPS_INDEX_READ)))
    except Exception as e:
        print("READ with the binding's constant %r raised %s: %s" % (n.NVML_P2P_CAPS_INDEX_READ, type(e).__name__, e))
    try:
        print("READ with index 0: %s (0 = OK)" % n.nvmlDeviceGetP2PStatus(a, b, 0))
    except Exception as e:
        print("READ with index 0 raised %s: %s" % (type(e).__name__, e))
EOF
if python3 -c 'import torch' 2>/dev/null; then
  python3 -c "
import torch
n = torch.cuda.device_count()
print('torch can_device_access_peer:', {'%d-%d' % (a, b): torch.cuda.can_device_access_peer(a, b) for a in range(n) for b in range(n) if a != b})
" | tee -a "$SUMMARY"
fi
rm -rf "$WORK"
