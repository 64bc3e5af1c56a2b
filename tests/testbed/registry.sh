#!/usr/bin/env bash
# A real local registry for the test bed (Debian's docker-registry, distribution 2.8): no auth, on
# loopback, storage under .work/registry. The daemon trusts 127.0.0.0/8 registries over plain http.
#   tests/testbed/registry.sh start|stop|address
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
STATE=$ROOT/.work/registry
ADDR=${GPUSERVE_TEST_REGISTRY:-127.0.0.1:5050}

answers() { python3 -c "import urllib.request,sys; urllib.request.urlopen('http://$ADDR/v2/', timeout=2)" 2>/dev/null; }

case ${1:-} in
  address) echo "$ADDR" ;;
  start)
    if answers; then echo "$ADDR"; exit 0; fi
    command -v docker-registry >/dev/null || { echo "docker-registry not found (apt-get install docker-registry)" >&2; exit 1; }
    mkdir -p "$STATE/data"
    cat > "$STATE/config.yml" <<CONF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $STATE/data}
  delete: {enabled: true}
http:
  addr: $ADDR
CONF
    setsid docker-registry serve "$STATE/config.yml" > "$STATE/registry.log" 2>&1 < /dev/null &
    echo $! > "$STATE/pid"
    for _ in $(seq 40); do answers && { echo "$ADDR"; exit 0; }; sleep 0.25; done
    tail -20 "$STATE/registry.log" >&2
    exit 1 ;;
  stop)
    if [[ -f $STATE/pid ]]; then kill "$(cat "$STATE/pid")" 2>/dev/null || true; fi
    rm -f "$STATE/pid" ;;
  *) echo "usage: $0 start|stop|address" >&2; exit 2 ;;
esac
