#!/bin/bash
# Re-arms the pf guard of sshd (com.apple/tuist.sshguard), run by launchd every 60 s
# (dev.tuist.sshguard): a macOS update, the Application Firewall or anyone's `pfctl -d` can leave pf
# off or the anchor flushed, and then nothing guards SSH. Both are checked, and restored when gone.
# It also lets go of sources blocked an hour ago: <sshguard> keeps what `overload` puts in it until
# told otherwise, and an address that hammered the port once (an office behind NAT, a CI runner's
# pool, this program's own deploy) must not be locked out of the box for good.
set -eu
anchor=com.apple/tuist.sshguard
rules=/etc/pf.anchors/tuist.sshguard
block_seconds=3600
if [ -z "$(pfctl -a "$anchor" -s rules 2>/dev/null)" ]; then
  pfctl -q -a "$anchor" -f "$rules"
  echo "sshguard: $anchor reloaded from $rules"
fi
info=$(pfctl -s info 2>/dev/null || true)
if ! printf '%s\n' "$info" | grep -q '^Status: Enabled'; then
  # -E takes a reference on pf: it stays on until that reference is released (-X), whoever else
  # enables or disables it.
  pfctl -E >/dev/null 2>&1
  echo "sshguard: pf enabled"
fi
# "N/M addresses expired." on stderr, said only when N is not 0.
expired=$(pfctl -a "$anchor" -t sshguard -T expire "$block_seconds" 2>&1 || true)
case $expired in
  0/* | "") ;;
  *) echo "sshguard: $expired" ;;
esac
