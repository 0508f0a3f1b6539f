#!/bin/bash
# installimage post-install script for Hetzner Robot runner boxes (tuist-anchor.md section 6.3).
#
# installimage runs it as root, chrooted into the freshly installed Ubuntu, before the first reboot.
# Kata must be baked into the OS this way: the DaemonSet-based kata-deploy restarted containerd on
# every change and bounced Cilium for minutes each time. The self-join later runs with
# CONTAINERD_SOURCE=preinstalled and leaves this containerd config alone.
set -euo pipefail

# Pinned artifacts. Every download is checked against these before it is used.
RUNC_VERSION=1.2.5
RUNC_SHA256=fbd851fce6a8e0d67a9d184ea544c2abf67c9fd29b80fcc1adf67dfe9eb036a1
# Ubuntu's containerd 1.7 cannot parse the `version = 3` config syntax: containerd 2.x from upstream.
CONTAINERD_VERSION=2.2.3
CONTAINERD_SHA256=ca26ef5138f17b847bbeeec36d4bf5e002b54d25858197a870c125d57f44d32f
KATA_VERSION=3.30.0
# Not yet pinned: set it to the sha256 of kata-static-3.30.0-amd64.tar.zst from the release page.
# Until then the script refuses to install rather than trust an unchecked download.
KATA_STATIC_SHA256=
# The NIC that must not get DHCPv6 / router advertisements (implicit DHCPv6 left boxes unreachable).
PUBLIC_NIC=enp3s0

if [ -z "$KATA_STATIC_SHA256" ]; then
  echo "robot-postinstall: KATA_STATIC_SHA256 is not pinned; refusing to install an unchecked Kata" >&2
  exit 1
fi
set -x

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch URL SHA256 FILE: download and verify, or fail before anything is installed from it.
fetch() {
  curl -fsSL --retry 5 -o "$3" "$1"
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
fetch "https://github.com/opencontainers/runc/releases/download/v${RUNC_VERSION}/runc.amd64" \
  "$RUNC_SHA256" "$work/runc.amd64"
fetch "https://github.com/containerd/containerd/releases/download/v${CONTAINERD_VERSION}/containerd-${CONTAINERD_VERSION}-linux-amd64.tar.gz" \
  "$CONTAINERD_SHA256" "$work/containerd.tar.gz"
install -D -m 0755 "$work/runc.amd64" /usr/local/sbin/runc
tar -C /usr/local -xzf "$work/containerd.tar.gz"

# 5. Kata's static bundle unpacks to /opt/kata (a .tar.zst: needs zstd).
if ! command -v zstd >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q zstd
fi
fetch "https://github.com/kata-containers/kata-containers/releases/download/${KATA_VERSION}/kata-static-${KATA_VERSION}-amd64.tar.zst" \
  "$KATA_STATIC_SHA256" "$work/kata-static.tar.zst"
tar --zstd -C / -xf "$work/kata-static.tar.zst"
test -x /opt/kata/bin/containerd-shim-kata-v2

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
echo "robot-postinstall: runc ${RUNC_VERSION}, containerd ${CONTAINERD_VERSION}, kata ${KATA_VERSION} installed"
