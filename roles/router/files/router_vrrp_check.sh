#!/bin/sh
# keepalived's check of a router host (gpuserve.llm, roles/router): exit 0 = this host may hold router_vip.
# $1: the check's folder, $2: how old (seconds) the watcher's verdict may be. router_vrrp_check.py's watcher
# checks every half interval in one process and writes its verdict ("code epoch-seconds"); a fresh one is the
# answer. Without one (the first run, a watcher that died or ended for a new check), this starts a watcher and
# runs the check itself, once (the two take turns on the check's lock).
dir=$1
if read -r code at < "$dir/verdict" 2>/dev/null; then
  case "$code:$at" in
    [01]:*[!0-9]* | [01]: ) ;;
    [01]:*) [ $(( $(date +%s) - at )) -le "$2" ] && exit "$code" ;;
  esac
fi
setsid /usr/bin/python3 "$dir/router_vrrp_check.py" "$dir/check.json" watch < /dev/null > /dev/null 2>&1 &
exec /usr/bin/python3 "$dir/router_vrrp_check.py" "$dir/check.json"
