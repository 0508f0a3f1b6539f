#!/bin/bash
# What `tuist-ops prep` checks on a box before the fleet may adopt it, over SSH with the fleet key
# (providers/ssh/runner.py: SUDO_PASSWORD arrives on stdin as a shell variable, never in argv).
# Changes nothing. Prints one `key=value` line per fact; exits 0 whatever it finds, so the caller
# judges every fact at once:
#   sudo=nopasswd|password|refused   how the login user becomes root (the self-join needs one of the
#                                    first two: it grants itself NOPASSWD with the password first)
#   data=separate|same-disk|missing  /data as the self-join sees it (its data_is_separate)
#   user=<login> host=<hostname>
set -uo pipefail
: "${SUDO_PASSWORD=}"

if [ "$(id -u)" -eq 0 ] || sudo -n true 2>/dev/null; then
  echo "sudo=nopasswd"
elif [ -n "$SUDO_PASSWORD" ] && printf '%s\n' "$SUDO_PASSWORD" | sudo -S -p '' true 2>/dev/null; then
  echo "sudo=password"
else
  echo "sudo=refused"
fi
unset SUDO_PASSWORD

if mountpoint -q /data 2>/dev/null; then
  if [ "$(findmnt -n -o SOURCE /data)" != "$(findmnt -n -o SOURCE /)" ]; then
    echo "data=separate"
  else
    echo "data=same-disk"
  fi
else
  echo "data=missing"
fi
echo "user=$(id -un)"
echo "host=$(hostname 2>/dev/null || cat /etc/hostname 2>/dev/null || echo unknown)"
