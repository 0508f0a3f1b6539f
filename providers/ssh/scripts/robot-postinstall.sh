#!/bin/bash
# installimage post-install script for Hetzner Robot runner boxes (tuist-anchor.md section 6.3).
#
# installimage runs it as root, chrooted into the freshly installed Ubuntu, before the first reboot.
# Kata must be baked into the OS this way: the DaemonSet-based kata-deploy restarted containerd on
# every change and bounced Cilium for minutes each time. The self-join later runs with
# CONTAINERD_SOURCE=preinstalled and leaves this containerd config alone.
set -euo pipefail

# Pinned artifacts: URL and sha256 of each, from the fleet's install_artifacts (config/models.py),
# rendered into the line below by providers/ssh/robot_install.py. Every download is checked against
# its sha256 before it is used.
# @ARTIFACT_PINS@
# The NIC that must not get DHCPv6 / router advertisements (implicit DHCPv6 left boxes unreachable), as
# the installed system's netplan names it: models differ (enp3s0, enp41s0, eno1, ...), and a name that
# is not the box's makes the fix silently do nothing.
public_nic() {
  local file nic
  for file in /etc/netplan/01-netcfg.yaml /etc/netplan/*.yaml; do
    [ -f "$file" ] || continue
    nic=$(awk '/^  ethernets:/ { on = 1; next } /^  [^ ]/ { on = 0 }
               on && /^    [A-Za-z0-9._-]+:[[:space:]]*$/ { sub(/:.*/, "", $1); print $1; exit }' "$file")
    if [ -n "$nic" ]; then
      printf '%s\n' "$nic"
      return 0
    fi
  done
}
PUBLIC_NIC=$(public_nic)
if [ -z "$PUBLIC_NIC" ]; then
  echo "robot-postinstall: no ethernet interface in /etc/netplan; cannot turn DHCPv6 off on the public NIC" >&2
  exit 1
fi

for pin in RUNC_URL RUNC_SHA256 CONTAINERD_URL CONTAINERD_SHA256 KATA_STATIC_URL; do
  if [ -z "${!pin:-}" ]; then
    echo "robot-postinstall: $pin is not set; render the script with its artifact pins" >&2
    exit 1
  fi
done
# The Kata sum is the one nobody has pinned for real stacks yet: refuse rather than trust a download.
if [ -z "${KATA_STATIC_SHA256:-}" ]; then
  echo "robot-postinstall: KATA_STATIC_SHA256 is not pinned; refusing to install an unchecked Kata" >&2
  exit 1
fi
set -x

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch URL SHA256 FILE: download and verify, or fail before anything is installed from it.
fetch() {
  # Bounded: a transfer below 1 KiB/s for a minute is cut and retried, never left hanging until the
  # install's step budget runs out (the state machine would then run installimage again beside it).
  curl -fsSL --connect-timeout 20 --retry 5 --retry-delay 5 --speed-limit 1024 --speed-time 60 -o "$3" "$1"
  printf '%s  %s\n' "$2" "$3" | sha256sum -c -
}

# 1. cloud-init must not manage the network (installimage wrote the static config).
mkdir -p /etc/cloud/cloud.cfg.d
cat >/etc/cloud/cloud.cfg.d/99-disable-network-config.cfg <<'CFG'
network: {config: disabled}
CFG
rm -f /etc/netplan/50-cloud-init.yaml

# 2. No DHCPv6 or router advertisements on the public NIC.
mkdir -p /etc/netplan
cat >/etc/netplan/99-tuist-disable-dhcp6.yaml <<YAML
network:
  version: 2
  ethernets:
    ${PUBLIC_NIC}:
      dhcp6: false
      accept-ra: false
YAML
chmod 0600 /etc/netplan/99-tuist-disable-dhcp6.yaml

# 3. The label the kata-qemu RuntimeClass selects on; the self-join adds it to the kubelet's labels.
mkdir -p /etc/tuist
cat >/etc/tuist/node-labels <<'LABELS'
katacontainers.io/kata-runtime=true
LABELS

# 4. runc and containerd, checksum-verified.
fetch "$RUNC_URL" "$RUNC_SHA256" "$work/runc.amd64"
fetch "$CONTAINERD_URL" "$CONTAINERD_SHA256" "$work/containerd.tar.gz"
install -D -m 0755 "$work/runc.amd64" /usr/local/sbin/runc
tar -C /usr/local -xzf "$work/containerd.tar.gz"

# 5. Kata's static bundle unpacks to /opt/kata (a .tar.zst: needs zstd).
# A freshly laid-down image may ship without package lists: read them first.
if ! command -v zstd >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q zstd
fi
fetch "$KATA_STATIC_URL" "$KATA_STATIC_SHA256" "$work/kata-static.tar.zst"
tar --zstd -C / -xf "$work/kata-static.tar.zst"
test -x /opt/kata/bin/containerd-shim-kata-v2

# 5b. Guest sizing of a runner slot (seed 003: 1 vCPU / 4 GiB, ~50 MiB of VMM per pod), as a
#     drop-in Kata reads after configuration-qemu.toml. The guest boots with 256 MiB (Kata's floor:
#     a smaller default_memory is silently replaced by 2048) and one vCPU, the container's limits
#     are hot-plugged on top, and every Kata process runs in the pod's cgroup, so the kata-qemu
#     RuntimeClass overhead (components/runner_pool.py: 256 MiB guest + 64 MiB host side) is what
#     the host pays per pod. tests/components/test_runners.py holds the two files to the same numbers.
mkdir -p /opt/kata/share/defaults/kata-containers/config.d
cat >/opt/kata/share/defaults/kata-containers/config.d/50-tuist-runner-slot.toml <<'TOML'
[hypervisor.qemu]
default_vcpus = 1
default_memory = 256

[runtime]
sandbox_cgroup_only = true
TOML

# 6. containerd config: the 2.x default, systemd cgroups, the registry mirror directory, and kata-qemu.
mkdir -p /etc/containerd
containerd config default |
  sed -E -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
    -e "/\[plugins\.'io\.containerd\.cri\.v1\.images'\.registry\]/,/config_path/ s|config_path = ''|config_path = '/etc/containerd/certs.d'|" \
    >/etc/containerd/config.toml
cat >>/etc/containerd/config.toml <<'TOML'

[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.kata-qemu]
  runtime_type = 'io.containerd.kata-qemu.v2'
  runtime_path = '/opt/kata/bin/containerd-shim-kata-v2'
  privileged_without_host_devices = true
  pod_annotations = ['io.katacontainers.*']

  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.kata-qemu.options]
    ConfigPath = '/opt/kata/share/defaults/kata-containers/configuration-qemu.toml'
TOML

# 7. The tarball ships no systemd unit: this is upstream's containerd.service for /usr/local/bin.
cat >/etc/systemd/system/containerd.service <<'UNIT'
[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/local/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
UNIT
systemctl enable containerd
echo "robot-postinstall: runc, containerd and kata installed from ${RUNC_URL}, ${CONTAINERD_URL}, ${KATA_STATIC_URL}"
