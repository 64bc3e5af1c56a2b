#!/usr/bin/env bash
# The README's main command. On a fresh Debian 12 machine with only this repository (as root):
# installs what is missing (docker.io, debootstrap, python3-venv), starts a Docker daemon if none
# answers, makes the workstation's virtualenv from requirements.txt, then brings inventories/local
# up with site.yml: llama.cpp on the CPU serving the burn-in model, ending with its LIVE line.
#   sudo bash scripts/bring-up-local.sh [ansible-playbook options, e.g. -e llm_port=8021]
# DOCKER_HOST, when set, names the daemon to use; GPUSERVE_VENV the virtualenv (default .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${GPUSERVE_VENV:-.venv}
DOCKER=${DOCKER_HOST:-unix:///var/run/docker.sock}

say() { printf '== %s\n' "$*"; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [[ ${#missing[@]} -gt 0 ]]; then
  [[ $(id -u) == 0 ]] || { echo "need root to install ${missing[*]} (sudo bash $0)" >&2; exit 1; }
  say "installing ${missing[*]} from Debian's packages"
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

answers() { DOCKER_HOST=$DOCKER timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
if ! answers; then
  [[ $DOCKER == unix:///var/run/docker.sock ]] || { echo "no Docker daemon answers at $DOCKER" >&2; exit 1; }
  say "starting the Docker daemon"
  if [[ -d /run/systemd/system ]]; then
    systemctl start docker
  else
    setsid dockerd > /var/log/gpuserve-dockerd.log 2>&1 < /dev/null &
  fi
  for _ in $(seq 60); do answers && break; sleep 0.5; done
  answers || { echo "the Docker daemon did not answer in 30 s (see /var/log/gpuserve-dockerd.log)" >&2; exit 1; }
fi

say "the workstation's virtualenv ($VENV) from requirements.txt"
# One stamp with the test command (scripts/venv.sh): a .venv it filled is kept. A virtualenv that is
# there keeps its Python (the test command's .venv-latest is 3.12); python3 makes a new one.
python=python3
if "$VENV/bin/python" -c '' 2>/dev/null; then python=$VENV/bin/python; fi
scripts/venv.sh "$VENV" "$python" requirements.txt

say "site.yml on inventories/local"
exec "$VENV/bin/ansible-playbook" site.yml -i inventories/local -e "llm_docker_host=$DOCKER" "$@"
