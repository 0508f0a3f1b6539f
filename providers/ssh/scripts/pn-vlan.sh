#!/bin/bash
# Private Network VLAN: brings an Elastic Metal box's Private Network up as the tagged VLAN pn0 on
# the primary NIC (tuist-anchor.md section 3 step 6), addressed by the network's DHCP (Scaleway IPAM).
#
# Delivered by providers/ssh/runner.py after the machine provider attached the server to the network
# (the attachment names the VLAN id): the secret SUDO_PASSWORD arrives on stdin, the parameters
# below as a header rendered by providers/ssh/privnet.py. The VLAN is written as a netplan file so it
# survives a reboot, and applied only when that file changed: running it again converges.
# PN_STATE=down (after the server left the network) removes the file and the interface instead.
#
# netplan apply alone neither removes a VLAN that is no longer configured nor changes the id of one
# that exists: netplan-apply(8), KNOWN ISSUES ("netplan apply will not remove virtual devices such
# as bridges and bonds that have been created, even if they are no longer described in the Netplan
# configuration"; the fix it names: ip link delete, then netplan apply), and systemd-networkd
# uses an existing netdev as it is (systemd.netdev(5): "the settings of the pre-existing netdev
# will not be changed by networkd"; systemd/systemd#9627: .netdev files only create missing
# devices). So the interface is deleted first whenever it is not what the file says.
set -euo pipefail

: "${PN_STATE:=up}"
: "${PN_INTERFACE:=pn0}"
: "${SUDO_PASSWORD=}"

case $PN_STATE in
  up)
    : "${PN_VLAN:?PN_VLAN is required}"
    if ! [[ $PN_VLAN =~ ^[0-9]+$ ]] || ((PN_VLAN < 1 || PN_VLAN > 4094)); then
      echo "pn-vlan: PN_VLAN '$PN_VLAN' is not a VLAN id (1-4094)" >&2
      exit 1
    fi
    ;;
  down) ;;
  *)
    echo "pn-vlan: PN_STATE '$PN_STATE' is not up or down" >&2
    exit 1
    ;;
esac

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

file=/etc/netplan/60-tuist-private-network.yaml

if [ "$PN_STATE" = down ]; then
  changed=0
  if as_root test -e "$file"; then
    as_root rm -f "$file"
    changed=1
  fi
  if ip link show "$PN_INTERFACE" >/dev/null 2>&1; then
    as_root ip link delete "$PN_INTERFACE"
    changed=1
  fi
  if [ "$changed" -eq 1 ]; then
    as_root netplan apply
  fi
  if ip link show "$PN_INTERFACE" >/dev/null 2>&1; then
    echo "pn-vlan: $PN_INTERFACE is still there after netplan apply: $(ip -d link show "$PN_INTERFACE")" >&2
    exit 1
  fi
  echo "pn-vlan: $PN_INTERFACE is down (no Private Network)"
  exit 0
fi

# The primary NIC: the one the default route leaves through (the VLAN rides on it).
primary=$(ip -o route show default | awk '{for (i = 1; i < NF; i++) if ($i == "dev") { print $(i + 1); exit }}')
if [ -z "$primary" ]; then
  echo "pn-vlan: no default route, so no primary interface to carry VLAN $PN_VLAN" >&2
  exit 1
fi

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
apply=0
if ! as_root cmp -s "$want" "$file"; then
  as_root mkdir -p /etc/netplan
  as_root install -m 0600 "$want" "$file"
  apply=1
fi
rm -f "$want"
# An interface of that name that is another VLAN (the server moved to another network) or rides on
# another NIC stays as it is through netplan apply: it goes first, and netplan makes it anew. No
# interface at all, the file in place, is a run whose netplan apply failed: apply again.
if current=$(ip -d link show "$PN_INTERFACE" 2>/dev/null); then
  if ! grep -q "^[0-9]*: $PN_INTERFACE@$primary:" <<<"$current" ||
    ! grep -q "vlan protocol 802.1Q id $PN_VLAN " <<<"$current"; then
    as_root ip link delete "$PN_INTERFACE"
    apply=1
  fi
else
  apply=1
fi
if [ "$apply" -eq 1 ]; then
  as_root netplan apply
fi

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
