#!/usr/bin/env bash
# A network namespace of its own for the simulated world: vendorsim and its boxes, the control plane,
# pulumi, the tests. Inside it `lo` is up and also carries the box network, 198.18.0.0/15 (RFC 2544,
# reserved for benchmarking, never routed on the internet): vendorsim gives each box an address
# there, the kubelets report it as InternalIP, and the apiserver accepts it in EndpointSlices, which
# it refuses for loopback (127.0.0.0/8) addresses. The namespace has no other interface, so nothing
# in it reaches the host's network or another namespace, and the host's own network is never
# changed. Set-up (Go builds, pip, apt) happens outside, before.
#
#   scripts/netns.sh exec -- CMD...         CMD in a new anonymous namespace, gone when CMD's processes are
#   scripts/netns.sh create NAME            a named namespace (ip netns add), set up; an existing one is kept
#   scripts/netns.sh run NAME -- CMD...     CMD in the named namespace (ip netns exec)
#   scripts/netns.sh delete NAME            removes the name (processes still inside keep it alive)
#   scripts/netns.sh pids NAME              the pids of the processes inside the named namespace
#   scripts/netns.sh inside NAME            exits 0 when the caller runs in the named namespace
#   scripts/netns.sh setup                  (inside a namespace) lo up with the box network; idempotent
#
# Needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN), as every simulated box already does.
set -euo pipefail

BOX_NETWORK=198.18.0.0/15
LO_ADDRESS=198.18.0.1/15
self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/netns.sh

die() { printf 'netns: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '10,16p' "$self" | sed 's/^# \{0,1\}//' >&2; exit 2; }

need_root() {
    [ "$(id -u)" -eq 0 ] || die "a network namespace needs root (run as root, as the simulated boxes do)"
    command -v ip >/dev/null || die "ip is missing: install iproute2 (scripts/bootstrap.sh does)"
    command -v unshare >/dev/null || die "unshare is missing: install util-linux (scripts/bootstrap.sh does)"
}

# setup: lo up with the box network. Refuses to run where lo has any other interface beside it that
# is up, i.e. in the host's own namespace: the box network must never be added there.
setup() {
    local others
    others=$(ip -o link show up | awk -F': ' '$2 != "lo" {print $2}' | tr '\n' ' ')
    [ -z "$others" ] || die "refusing to set up the box network: this namespace has other interfaces up ($others)"
    ip link set lo up
    if ! ip -o -4 addr show dev lo | grep -qF " ${LO_ADDRESS} "; then
        ip addr add "$LO_ADDRESS" dev lo
    fi
}

valid_name() {
    [[ ${1:-} =~ ^[a-z0-9][a-z0-9-]{0,30}$ ]] || die "namespace name '${1:-}' is not [a-z0-9-] (at most 31)"
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
case $cmd in
    exec)
        [ "${1:-}" = "--" ] && shift
        [ $# -gt 0 ] || usage
        need_root
        # shellcheck disable=SC2016 # $1 and $@ are the inner shell's: this script, then CMD.
        exec unshare --net -- bash -c 'bash "$1" setup && shift && exec "$@"' netns "$self" "$@"
        ;;
    create)
        valid_name "${1:-}"
        need_root
        name=$1
        if ! ip netns list | awk '{print $1}' | grep -qxF "$name"; then
            ip netns add "$name"
        fi
        ip netns exec "$name" bash "$self" setup
        ;;
    run)
        valid_name "${1:-}"
        name=$1
        shift
        [ "${1:-}" = "--" ] && shift
        [ $# -gt 0 ] || usage
        need_root
        ip netns list | awk '{print $1}' | grep -qxF "$name" || die "no network namespace $name (scripts/dev-up.sh creates it)"
        exec ip netns exec "$name" "$@"
        ;;
    delete)
        valid_name "${1:-}"
        need_root
        if ip netns list | awk '{print $1}' | grep -qxF "$1"; then ip netns delete "$1"; fi
        ;;
    pids)
        valid_name "${1:-}"
        need_root
        if ip netns list | awk '{print $1}' | grep -qxF "$1"; then ip netns pids "$1"; fi
        ;;
    inside)
        valid_name "${1:-}"
        [ -e "/run/netns/$1" ] && [ "$(stat -L -c %i /proc/self/ns/net)" = "$(stat -L -c %i "/run/netns/$1")" ]
        ;;
    setup) setup ;;
    network) echo "$BOX_NETWORK" ;;
    *) usage ;;
esac
