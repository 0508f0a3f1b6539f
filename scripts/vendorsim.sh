#!/usr/bin/env bash
# start|stop|status the dev vendorsim on 127.0.0.1:${VENDORSIM_PORT:-8710}, in the dev stack's network
# namespace (scripts/netns.sh; created when missing), where its boxes' addresses exist. Its state
# (SQLite, log, pidfile) is in build/vendorsim, or $VENDORSIM_STATE_DIR (an absolute path).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
port=${VENDORSIM_PORT:-8710}
state=${VENDORSIM_STATE_DIR:-$TUIST_ROOT/build/vendorsim}
pidfile="$state/vendorsim.pid"
# vendorsim_pid: the pid of the vendorsim this state directory runs, if it runs. The pidfile outlives
# a reboot, and its pid may since name another process: a live pid is taken only when its command
# line is vendorsim's with this state directory (as scripts/cluster.sh's pid_of does).
vendorsim_pid() {
    local pid cmdline
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    cmdline=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
    case " $cmdline" in
        *" -m vendorsim "*" --state $state "*) echo "$pid" ;;
        *) return 1 ;;
    esac
}
running() { vendorsim_pid >/dev/null; }
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
    pid=$!
    echo "$pid" > "$pidfile"
    for _ in $(seq 1 100); do
        if curl -fsS "http://127.0.0.1:$port/_admin/health" >/dev/null 2>&1; then
            echo "==> vendorsim on 127.0.0.1:$port (log: $state/vendorsim.log)"; exit 0
        fi
        # This shell's own child (its command line is this script's until it has exec'd vendorsim).
        kill -0 "$pid" 2>/dev/null || { cat "$state/vendorsim.log" >&2; echo "vendorsim exited" >&2; exit 1; }
        sleep 0.2
    done
    echo "vendorsim did not answer on 127.0.0.1:$port within 20s" >&2; exit 1 ;;
stop)
    if pid=$(vendorsim_pid); then
        kill "$pid"
        # It stops every box's sshd on the way out; wait so nothing outlives this script.
        for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        if kill -0 "$pid" 2>/dev/null; then echo "vendorsim (pid $pid) did not stop within 30s" >&2; exit 1; fi
    fi
    rm -f "$pidfile" ;;
status)
    if pid=$(vendorsim_pid); then echo "running (pid $pid)"; else echo "stopped"; exit 1; fi ;;
*) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
