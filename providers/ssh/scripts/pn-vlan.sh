#!/bin/bash
# Private Network VLAN: brings an Elastic Metal box's Private Network up as the tagged VLAN pn0 on
# the primary NIC (tuist-anchor.md section 3 step 6), addressed by the network's DHCP (Scaleway IPAM).
#
# Delivered by providers/ssh/runner.py after the machine provider attached the server to the network
# (the attachment names the VLAN id): the secret SUDO_PASSWORD arrives on stdin, the parameters
# below as a header rendered by providers/ssh/privnet.py. The VLAN is written as a netplan file so it
# survives a reboot, and applied only when that file changed: running it again converges.
set -euo pipefail

: "${PN_VLAN:?PN_VLAN is required}"
: "${PN_INTERFACE:=pn0}"
: "${SUDO_PASSWORD=}"

if ! [[ $PN_VLAN =~ ^[0-9]+$ ]] || ((PN_VLAN < 1 || PN_VLAN > 4094)); then
  echo "pn-vlan: PN_VLAN '$PN_VLAN' is not a VLAN id (1-4094)" >&2
  exit 1
fi

# Root through sudo; the password (when sudo asks for one) goes to sudo -S on stdin. xtrace traces
# builtins too, so tracing is off while the password is on a command line, and the command is traced
# by hand instead.
if [ "$(id -u)" -eq 0 ]; then
  as_root() { "$@"; }
elif sudo -n true 2>/dev/null; then
  as_root() { sudo -n "$@"; }
else
  if [ -z "$SUDO_PASSWORD" ]; then
    echo "pn-vlan: $(id -un) has no passwordless sudo and no sudo password was given" >&2
    exit 1
  fi
  as_root() {
    { local tracing=$-; set +x; } 2>/dev/null
    [[ $tracing != *x* ]] || echo "+ sudo -S $*" >&2
    local status=0
    printf '%s\n' "$SUDO_PASSWORD" | sudo -S -p '' "$@" || status=$?
    [[ $tracing != *x* ]] || set -x
    return "$status"
  }
fi

set -x

# The primary NIC: the one the default route leaves through (the VLAN rides on it).
primary=$(ip -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
if [ -z "$primary" ]; then
  echo "pn-vlan: no default route, so no primary interface to carry VLAN $PN_VLAN" >&2
  exit 1
fi

file=/etc/netplan/60-tuist-private-network.yaml
want=$(mktemp)
# The public interface keeps the default route: the Private Network's DHCP must not replace it.
cat >"$want" <<EOF
# Written by tuist-infra (providers/ssh/scripts/pn-vlan.sh): the Elastic Metal Private Network.
network:
  version: 2
  vlans:
    $PN_INTERFACE:
      id: $PN_VLAN
      link: $primary
      dhcp4: true
      dhcp4-overrides:
        use-routes: false
        use-dns: false
EOF
if ! as_root cmp -s "$want" "$file"; then
  as_root mkdir -p /etc/netplan
  as_root install -m 0600 "$want" "$file"
  as_root netplan apply
fi
rm -f "$want"

# The VLAN is up with the id the attachment named, or the step fails saying what it found.
details=$(ip -d link show "$PN_INTERFACE") || {
  echo "pn-vlan: $PN_INTERFACE did not come up after netplan apply" >&2
  exit 1
}
if ! grep -q "vlan protocol 802.1Q id $PN_VLAN " <<<"$details"; then
  echo "pn-vlan: $PN_INTERFACE is not VLAN $PN_VLAN on $primary: $details" >&2
  exit 1
fi
echo "pn-vlan: $PN_INTERFACE is VLAN $PN_VLAN on $primary"
