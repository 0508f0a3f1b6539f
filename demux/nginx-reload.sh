#!/bin/sh
# The peer demux container's entrypoint (stock nginx:alpine, busybox sh): run nginx and reload it,
# gracefully, whenever the routes the reconciler writes change (demux/reconciler.py).
#
# The routes ConfigMap is mounted as a directory (no subPath), so the kubelet swaps in new contents
# on its own; every RELOAD_INTERVAL_SECONDS this script compares them with the routes nginx runs
# with, validates the candidate with `nginx -t`, and sends nginx SIGHUP (what `nginx -s reload`
# sends): the master starts workers with the new map and the old workers finish the connections
# they hold, so an established peer connection outlives the reload. A candidate nginx refuses is
# logged once and never installed; nginx keeps the last good routes.
#
# On SIGTERM (after the pod's preStop wait) nginx gets SIGQUIT: it stops accepting and lets open
# connections finish until the grace period ends.
set -eu

ROUTES_SOURCE=${ROUTES_SOURCE:-/etc/kura-peer-demux/routes/routes.map}
ROUTES_FILE=${ROUTES_FILE:-/run/kura-peer-demux/routes.map}
NGINX_CONF=${NGINX_CONF:-/etc/kura-peer-demux/config/nginx.conf}
# Not "NGINX": nginx itself reads that variable (sockets inherited across a binary upgrade).
NGINX_BIN=${NGINX_BIN:-nginx}
# Extra arguments for every nginx call (the tests add -p/-e for a scratch prefix).
NGINX_ARGS=${NGINX_ARGS:-}
RELOAD_INTERVAL_SECONDS=${RELOAD_INTERVAL_SECONDS:-2}

log() { echo "nginx-reload: $*" >&2; }

# shellcheck disable=SC2086  # NGINX_ARGS is a word list on purpose
nginx_cmd() { "$NGINX_BIN" -c "$NGINX_CONF" $NGINX_ARGS "$@"; }

# Install the mounted routes when they differ from the running ones and nginx accepts them.
# Returns 0 when new routes were installed, 1 otherwise.
install_routes() {
  candidate=$ROUTES_SOURCE
  # No routes written yet (a new region): an empty map, which closes every connection.
  [ -f "$candidate" ] || candidate=/dev/null
  if [ -f "$ROUTES_FILE" ] && cmp -s "$candidate" "$ROUTES_FILE"; then
    return 1
  fi
  if [ -f "$ROUTES_FILE.rejected" ] && cmp -s "$candidate" "$ROUTES_FILE.rejected"; then
    return 1
  fi
  if [ -f "$ROUTES_FILE" ]; then cp "$ROUTES_FILE" "$ROUTES_FILE.good"; fi
  cp "$candidate" "$ROUTES_FILE.next"
  mv -f "$ROUTES_FILE.next" "$ROUTES_FILE"
  if output=$(nginx_cmd -t -q 2>&1); then
    rm -f "$ROUTES_FILE.good" "$ROUTES_FILE.rejected"
    return 0
  fi
  cp "$candidate" "$ROUTES_FILE.rejected"
  if [ -f "$ROUTES_FILE.good" ]; then
    mv -f "$ROUTES_FILE.good" "$ROUTES_FILE"
  else
    : >"$ROUTES_FILE"
  fi
  # Said once the running routes are back: whoever reads this line sees the old routes in place.
  log "refusing new routes, nginx -t says: $output"
  return 1
}

mkdir -p "$(dirname "$ROUTES_FILE")"
rm -f "$ROUTES_FILE" "$ROUTES_FILE.rejected" "$ROUTES_FILE.good"
# The static config as it was when this pod started, used for good: the kubelet swaps a changed
# ConfigMap into every pod's mount, and a routes reload would otherwise take it up on every box at
# once, outside the DaemonSet's one-box-at-a-time roll (a new config arrives with a new pod).
RUN_CONF=$(dirname "$ROUTES_FILE")/nginx.conf
cp "$NGINX_CONF" "$RUN_CONF"
NGINX_CONF=$RUN_CONF
install_routes || true

# A plain command, not the function: `$!` must be nginx itself (a backgrounded function is a subshell).
# shellcheck disable=SC2086  # NGINX_ARGS is a word list on purpose
"$NGINX_BIN" -c "$NGINX_CONF" $NGINX_ARGS -g 'daemon off;' &
nginx_pid=$!
log "nginx started (pid $nginx_pid) with $(grep -c '^"' "$ROUTES_FILE" || true) route(s)"

# SIGQUIT is nginx's graceful shutdown; SIGTERM would drop open connections at once.
stopping=0
trap 'stopping=1; log "stopping nginx gracefully"; kill -QUIT "$nginx_pid" 2>/dev/null || true' TERM INT

while [ "$stopping" -eq 0 ] && kill -0 "$nginx_pid" 2>/dev/null; do
  sleep "$RELOAD_INTERVAL_SECONDS" &
  wait $! || true
  if [ "$stopping" -ne 0 ] || ! kill -0 "$nginx_pid" 2>/dev/null; then break; fi
  if install_routes; then
    kill -HUP "$nginx_pid"
    log "reloaded with $(grep -c '^"' "$ROUTES_FILE" || true) route(s)"
  fi
done
# A trap interrupts wait (status > 128) while nginx still runs: wait again until it has exited.
status=0
while :; do
  if wait "$nginx_pid"; then status=0; else status=$?; fi
  kill -0 "$nginx_pid" 2>/dev/null || break
done
exit "$status"
