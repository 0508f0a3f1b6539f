#!/bin/bash
# sshd ForceCommand of a simulated box (vendorsim/boxes.py): runs the client's command inside the box.
#
# The box is a private mount namespace whose / is an overlay: the host's / read-only underneath, the
# box's own disk (<box>/root) as the writable layer. Everything a script writes, anywhere, lands in the
# box and never on the host; a reinstall wipes the layer. Commands that would reach past the filesystem
# (mount, sysctl, modprobe, swapoff, apt, systemctl, curl, sudo, ...) resolve to the shims in
# sandbox/shims, which record each call and emulate it inside the box.
#
# Services the box runs (the kubelet, started by the systemctl shim through sandbox/shims/sim-service)
# live in the namespace of the session that started them. While one runs, a session joins that
# namespace instead of mounting the disk a second time, so the box has one filesystem, as a running
# machine does: what a session writes, the kubelet sees.
#
# Usage (from sshd_config): ForceCommand <this file> <box dir>
#        (vendorsim/boxes.py, at boot): <this file> <box dir> --boot   starts the enabled services
set -euo pipefail

box_dir=$1
mode=${2:-session}
# sshd runs this file by its absolute path (vendorsim/boxes.py); resolve anything else. Every session of
# every box runs what follows, so it keeps to bash builtins where a command would only cost a fork.
here=${BASH_SOURCE[0]%/*}
[[ $here == /* ]] || here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# A Mac mini (Apple silicon) records its platform (vendorsim/macos_disk.py): macOS tools, /Users homes.
platform=linux
if [[ -f $box_dir/hardware/platform ]]; then
  # shellcheck source=/dev/null
  platform=$(. "$box_dir/hardware/platform" && printf '%s' "$SIM_OS")
fi

# The login user's home: /Users on a Mac.
home_of() {
  if [[ $1 == root ]]; then echo /root; elif [[ $platform == macos ]]; then echo "/Users/$1"; else echo "/home/$1"; fi
}

# The pid of a service supervisor running in this box, if any (its command line names the box).
running_service() {
  local pidfile pid
  for pidfile in "$box_dir"/system/root/var/lib/sim/systemd/*.pid; do
    [[ -f $pidfile ]] || continue
    pid=$(<"$pidfile")
    if [[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] &&
      tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "sim-service $box_dir "; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# The shell a session runs in, once inside the box (chrooted or joined).
session_shell() {
  local user home
  # shellcheck source=/dev/null
  user=$(. "$box_dir/box.env" && printf '%s' "$SIM_USER")
  home=$(home_of "$user")
  local command=${SSH_ORIGINAL_COMMAND:-exec bash} extra=()
  local path=/run/sim/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  # macOS's own tools (sandbox/macos/shims) answer as a Mac would; the Linux shims stay reachable
  # only by their path (the macOS sudo wraps the Linux one), never by name.
  if [[ $platform == macos ]]; then path=/run/sim/macos/shims:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin; fi
  if [[ $mode == --boot ]]; then
    # Boot: systemd starts what is enabled. Root, whoever the login user is.
    # shellcheck disable=SC2016 # expanded by the box's shell
    command='rm -f /var/lib/sim/systemd/active; for u in $(cat /var/lib/sim/systemd/enabled 2>/dev/null); do systemctl start "$u"; done'
    extra=(SIM_AS_ROOT=1)
  fi
  printf '%s\0' /usr/bin/env -i --chdir="$home" \
    PATH="$path" \
    HOME="$home" USER="$user" LOGNAME="$user" SHELL=/bin/bash LANG=C.UTF-8 "${extra[@]}" \
    /bin/bash -c "$command"
}

if [[ ${SIM_BOX_INNER:-} != 1 ]]; then
  # One session at a time per box: two overlay mounts sharing one upper dir is undefined behaviour.
  exec 9>"$box_dir/session.lock"
  flock 9
  if [[ ! -f $box_dir/boot || $(<"$box_dir/boot") != rescue ]] && pid=$(running_service); then
    mapfile -d '' shell < <(session_shell)
    exec nsenter --target "$pid" --mount --uts --root -- "${shell[@]}"
  fi
  SIM_BOX_INNER=1 exec unshare --mount --uts --propagation private -- "${BASH_SOURCE[0]}" "$box_dir" "$mode"
fi
unset SIM_BOX_INNER

# --- inside the box's own mount namespace from here on ----------------------------------------------
# The running system's layer: the installed OS on the box's disk, or Robot's rescue system in RAM.
layer=system
if [[ -f $box_dir/boot && $(<"$box_dir/boot") == rescue ]]; then layer=rescue; fi
merged=$box_dir/merged
mkdir -p "$box_dir/$layer/root" "$box_dir/$layer/work" "$merged"
mount -t overlay "box" -o "lowerdir=/,upperdir=$box_dir/$layer/root,workdir=$box_dir/$layer/work" "$merged"

# The box's own hostname, in its own UTS namespace (a Mac has no /etc/hostname).
hostfile=$merged/etc/hostname
if [[ $platform == macos ]]; then hostfile=$merged/var/lib/sim/hostname; fi
IFS= read -r box_hostname <"$hostfile" || true
hostname "$box_hostname"

mount -t proc proc "$merged/proc"
# The box's own hardware where cAdvisor reads it, as lxcfs does for containers (boxes.py writes them).
for f in cpuinfo meminfo; do
  if [[ -f $box_dir/hardware/$f ]]; then mount --bind "$box_dir/hardware/$f" "$merged/proc/$f"; fi
done
# The kernel's knobs stay read-only: a script writing /proc/sys directly must not reach the host.
mount --bind "$merged/proc/sys" "$merged/proc/sys"
mount -o remount,bind,ro "$merged/proc/sys"
if [[ -e $merged/proc/sysrq-trigger ]]; then
  mount --bind "$merged/proc/sysrq-trigger" "$merged/proc/sysrq-trigger"
  mount -o remount,bind,ro "$merged/proc/sysrq-trigger"
fi

# A minimal /dev: the character devices scripts use, none of the host's disks.
mount -t tmpfs -o mode=755,nosuid tmpfs "$merged/dev"
for dev in null zero full random urandom tty; do
  : >"$merged/dev/$dev"
  mount --bind "/dev/$dev" "$merged/dev/$dev"
done
ln -s /proc/self/fd "$merged/dev/fd"
ln -s /proc/self/fd/0 "$merged/dev/stdin"
ln -s /proc/self/fd/1 "$merged/dev/stdout"
ln -s /proc/self/fd/2 "$merged/dev/stderr"
mkdir -p "$merged/dev/shm" "$merged/dev/pts"

# /run and /tmp start empty each session, as after a boot; the host's /tmp is not the box's.
mount -t tmpfs -o mode=755,nosuid tmpfs "$merged/run"
mount -t tmpfs -o mode=1777,nosuid tmpfs "$merged/tmp"
mkdir -p "$merged/run/sim/bin"
mount --bind "$here/shims" "$merged/run/sim/bin"
mount -o remount,bind,ro "$merged/run/sim/bin"
cp "$box_dir/box.env" "$merged/run/sim/box.env"
printf 'SIM_BOX_DIR=%s\n' "$box_dir" >>"$merged/run/sim/box.env"
# The farm's timing model (vendorsim --apt-seconds): how long the shims take, as a real box's would.
if [[ -r $box_dir/../timing.env ]]; then
  cat "$box_dir/../timing.env" >>"$merged/run/sim/box.env"
fi
chmod 0600 "$merged/run/sim/box.env"
# An installed Ubuntu runs systemd-resolved: its upstream servers in /run (/etc/resolv.conf names its
# 127.0.0.53 stub). The rescue system does not.
if [[ $platform == linux && $layer == system ]]; then
  mkdir -p "$merged/run/systemd/resolve"
  printf 'nameserver 198.51.100.53\n' >"$merged/run/systemd/resolve/resolv.conf"
fi
if [[ $platform == macos ]]; then
  mkdir -p "$merged/run/sim/macos"
  mount --bind "$here/macos" "$merged/run/sim/macos"
  mount -o remount,bind,ro "$merged/run/sim/macos"
  cp "$box_dir/hardware/platform" "$merged/run/sim/platform"
fi
# The kubelet the apt shim's package runs: the stand-in built by scripts/bootstrap.sh.
kubelet_standin=$here/../../.toolchain/bin/kubelet-standin
if [[ -x $kubelet_standin ]]; then
  : >"$merged/run/sim/kubelet"
  mount --bind "$kubelet_standin" "$merged/run/sim/kubelet"
  mount -o remount,bind,ro "$merged/run/sim/kubelet"
fi

# The box's disks, for lsblk (sandbox/shims/lsblk).
if [[ -f $box_dir/hardware/disks ]]; then
  cp "$box_dir/hardware/disks" "$merged/run/sim/disks"
fi

# The rescue system sees the box's disk unmounted, and the OS image installimage lays down on it: the
# host's / read-only, the same lower layer every installed box runs on.
if [[ $layer == rescue ]]; then
  mkdir -p "$merged/run/sim/disk" "$merged/run/sim/image"
  mount --bind "$box_dir/system" "$merged/run/sim/disk"
  mount --bind / "$merged/run/sim/image"
  mount -o remount,bind,ro "$merged/run/sim/image"
fi

# /data is its own filesystem only on boxes declared so (the <box>/data-is-separate flag).
if [[ $layer == system && -f $box_dir/data-is-separate ]]; then
  mkdir -p "$box_dir/disks/data" "$merged/data"
  mount --bind "$box_dir/disks/data" "$merged/data"
fi

# Bind mounts made in earlier sessions are still there, as on a running box.
if [[ -f $merged/var/lib/sim/mounts ]]; then
  while read -r src dst; do
    if [[ -d $merged$src && -d $merged$dst ]]; then
      mount --bind "$merged$src" "$merged$dst"
    fi
  done <"$merged/var/lib/sim/mounts"
fi

# shellcheck source=/dev/null
user=$(. "$box_dir/box.env" && printf '%s' "$SIM_USER")
mkdir -p "$merged$(home_of "$user")"

mapfile -d '' shell < <(session_shell)
exec chroot "$merged" "${shell[@]}"
