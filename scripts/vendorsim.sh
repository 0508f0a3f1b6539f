#!/usr/bin/env bash
# start|stop|status the dev vendorsim on 127.0.0.1:${VENDORSIM_PORT:-8710}, in the dev stack's network
# namespace (scripts/netns.sh; created when missing), where its boxes' addresses exist.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
port=${VENDORSIM_PORT:-8710}
state="$TUIST_ROOT/build/vendorsim"
pidfile="$state/vendorsim.pid"
running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
case "${1:-status}" in
start)
    if ! bash "$here/netns.sh" inside "$TUIST_DEV_NETNS"; then
        bash "$here/netns.sh" create "$TUIST_DEV_NETNS"
        exec bash "$here/netns.sh" run "$TUIST_DEV_NETNS" -- bash "$here/vendorsim.sh" start
    fi
    if running; then exit 0; fi
    mkdir -p "$state"
    inventory="$TUIST_ROOT/vendorsim/inventory.dev.yaml"
    # State seeded from another version of the inventory is reseeded, not half-reused.
    reset=()
    seeded=$(sha256sum "$inventory" | cut -d' ' -f1)
    if [ "$(cat "$state/inventory.sha256" 2>/dev/null)" != "$seeded" ]; then
        reset=(--reset)
        echo "$seeded" > "$state/inventory.sha256"
    fi
    nohup python -m vendorsim --inventory "$inventory" "${reset[@]}" \
        --state "$state" --port "$port" >"$state/vendorsim.log" 2>&1 &
    echo $! > "$pidfile"
    for _ in $(seq 1 100); do
        if curl -fsS "http://127.0.0.1:$port/_admin/health" >/dev/null 2>&1; then
            echo "==> vendorsim on 127.0.0.1:$port (log: build/vendorsim/vendorsim.log)"; exit 0
        fi
        running || { cat "$state/vendorsim.log" >&2; echo "vendorsim exited" >&2; exit 1; }
        sleep 0.2
    done
    echo "vendorsim did not answer on 127.0.0.1:$port within 20s" >&2; exit 1 ;;
stop)
    if running; then
        pid=$(cat "$pidfile")
        kill "$pid"
        # It stops every box's sshd on the way out; wait so nothing outlives this script.
        for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then echo "vendorsim (pid $pid) did not stop within 30s" >&2; exit 1; fi
    fi
    rm -f "$pidfile" ;;
status)
    if running; then echo "running (pid $(cat "$pidfile"))"; else echo "stopped"; exit 1; fi ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
