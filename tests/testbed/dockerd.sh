#!/usr/bin/env bash
# The test bed's own Docker daemon: its own socket, data root and exec root, beside any other
# daemon on the machine, with a runtime registered as `nvidia` that is plain runc — a TEST DOUBLE
# of the NVIDIA container runtime (the preflight's E_NVIDIA_RUNTIME check sees the name; the
# containers run on the CPU). Networking is host-only (--bridge none, no iptables).
#
#   tests/testbed/dockerd.sh start   # start it unless it answers; prints DOCKER_HOST=...
#   tests/testbed/dockerd.sh stop
#   tests/testbed/dockerd.sh host    # the DOCKER_HOST value
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=${GPUSERVE_TESTBED_STATE:-$ROOT/.work/docker}
# Unix socket paths must stay short (108 bytes), so the runtime state lives under /run.
RUNDIR=/run/gpuserve-testbed-$(echo "$STATE" | sha256sum | cut -c1-8)
SOCK=$RUNDIR/docker.sock
HOST=unix://$SOCK

answers() { DOCKER_HOST=$HOST timeout 5 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

case ${1:-} in
  host)
    echo "$HOST" ;;
  start)
    if answers; then echo "DOCKER_HOST=$HOST"; exit 0; fi
    DOCKERD=$(command -v dockerd || true)
    RUNC=$(command -v runc || echo /usr/sbin/runc)
    [[ -n $DOCKERD ]] || { echo "dockerd not found (apt-get install docker.io)" >&2; exit 1; }
    mkdir -p "$STATE/data" "$RUNDIR/exec"
    rm -f "$SOCK" "$RUNDIR/dockerd.pid"
    setsid "$DOCKERD" -H "$HOST" --data-root "$STATE/data" --exec-root "$RUNDIR/exec" \
      --pidfile "$RUNDIR/dockerd.pid" --bridge none --iptables=false --ip-masq=false \
      --add-runtime "nvidia=$RUNC" --storage-driver overlay2 \
      > "$STATE/dockerd.log" 2>&1 < /dev/null &
    for _ in $(seq 60); do
      if answers; then echo "DOCKER_HOST=$HOST"; exit 0; fi
      sleep 0.5
    done
    echo "the test bed's dockerd did not answer in 30 s; its log:" >&2
    tail -20 "$STATE/dockerd.log" >&2
    exit 1 ;;
  stop)
    if [[ -f $RUNDIR/dockerd.pid ]]; then
      pid=$(cat "$RUNDIR/dockerd.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    # A daemon killed midway leaves its data root's mounts, which block removing the checkout.
    awk -v d="$STATE/data" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r |
      while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
    rm -f "$SOCK" ;;
  *)
    echo "usage: $0 start|stop|host" >&2; exit 2 ;;
esac
