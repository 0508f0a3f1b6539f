#!/bin/sh
# The peer demux pod's init container (stock nginx:alpine, busybox sh and ip): make the region's
# failover IP an address of this box, and drop the ones it no longer has.
#
# The vendors route the failover IP to the box's main address; its kernel takes the packets only for
# an address of its own. On lo, as a /32: local to the box, announced on no link. Each address this
# script adds carries LABEL, so a later run finds the ones a changed or removed failover IP left: a
# stale one would make the box keep, as its own, packets for an address the vendor may have given
# to someone else. A host-network fleet serves one region (config/rules.py), so every address with
# the label is that region's.
#
# Usage: failover-address.sh [ADDRESS]   (none: the region has no failover IP; only the clean-up)
set -eu

ADDRESS=${1:-}
LABEL=${LABEL:-lo:failover}

if [ -n "$ADDRESS" ]; then
    # Added first, removed after: the current address is never missing while a stale one goes.
    ip addr replace "$ADDRESS/32" dev lo label "$LABEL"
fi
ip -4 addr show dev lo | while read -r family address rest; do
    [ "$family" = inet ] || continue
    label=${rest##* }
    if [ "$address" = "$ADDRESS/32" ]; then
        [ "$label" = "$LABEL" ] && continue
        # Added before it carried the label: the kernel relabels only by adding it again. No demux on
        # this box serves yet (the pod is starting), and the watcher routes the IP to Ready ones.
        ip addr del "$address" dev lo
        ip addr add "$address" dev lo label "$LABEL"
    elif [ "$label" = "$LABEL" ]; then
        echo "failover-address: removing $address (no longer the region's failover IP)" >&2
        ip addr del "$address" dev lo
    fi
done
