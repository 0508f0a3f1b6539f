#!/bin/bash
# Self-join: turns a pre-installed Ubuntu box into a Kubernetes node of the cluster, over SSH.
#
# Delivered by providers/ssh/runner.py: the secrets SUDO_PASSWORD and BOOTSTRAP_TOKEN arrive as shell
# variables read from stdin (never argv, never the environment), the parameters below as a header
# rendered by providers/ssh/selfjoin.py. The steps follow the order the anchor's
# linux_cloudinit.go proved out (tuist-anchor.md section 3); the comments say which incident each
# ordering prevents. Running it again converges: files are rewritten only when their content changes
# and services restart only then.
set -euo pipefail
# `... | put FILE` runs put in this shell, not a subshell: the temporary file it names in PUT_TMP is
# the one the EXIT trap removes.
shopt -s lastpipe

: "${NODE_NAME:?NODE_NAME is required}"
: "${NODE_IP:?NODE_IP is required}"
: "${PROVIDER_ID:?PROVIDER_ID is required}"
: "${NODE_LABELS:?NODE_LABELS is required}"
: "${NODE_TAINTS=}"
: "${K8S_MINOR:?K8S_MINOR is required}"
: "${API_SERVER:?API_SERVER is required}"
: "${CA_BUNDLE_B64:?CA_BUNDLE_B64 is required}"
: "${CLUSTER_DNS=}"
: "${CLUSTER_DOMAIN:=cluster.local}"
: "${CONTAINERD_SOURCE:=apt}"
: "${SUDO_PASSWORD=}"
: "${BOOTSTRAP_TOKEN:?BOOTSTRAP_TOKEN is required}"

set -x

if [ "$(id -u)" -eq 0 ]; then SUDO=(); else SUDO=(sudo); fi
as_root() { "${SUDO[@]}" "$@"; }

# What a changed file asks of its service, owed on disk under PENDING before the change is made and
# paid once done. A run that changes a file and stops before the restart (a later step failed, the
# session dropped) leaves it owed: the next run finds every file already in place, and must still
# restart the service onto them.
PENDING=/var/lib/tuist/self-join
owe() { as_root mkdir -p "$PENDING" && as_root touch "$PENDING/$1"; }
owed() { as_root test -e "$PENDING/$1"; }
paid() { as_root rm -f "$PENDING/$1"; }
# owe_for PATH: what a change of PATH calls for. (The bootstrap kubeconfig calls for nothing: the
# kubelet reads it only until it holds its own certificate.)
owe_for() {
  case $1 in
    /etc/systemd/system/kubelet.service | /var/lib/kubelet/config.yaml) owe kubelet ;;
    # A new cluster CA: the kubelet's own kubeconfig and certificate name the old one (below).
    /etc/kubernetes/pki/ca.crt) owe kubelet && owe rebootstrap ;;
    /etc/containerd/config.toml | /etc/containerd/certs.d/docker.io/hosts.toml) owe containerd ;;
  esac
}
# put PATH MODE < content: install the content at PATH unless it is already there, owing what it calls for.
# The temporary copy may hold a secret (the bootstrap kubeconfig): removed even when a step fails.
PUT_TMP=
trap 'rm -f "${PUT_TMP:-}"' EXIT
put() {
  local path=$1 mode=$2
  PUT_TMP=$(mktemp)
  cat >"$PUT_TMP"
  if as_root cmp -s "$PUT_TMP" "$path"; then
    as_root chmod "$mode" "$path"
  else
    owe_for "$path"
    as_root install -D -m "$mode" "$PUT_TMP" "$path"
  fi
  rm -f "$PUT_TMP"
  PUT_TMP=
}

# apt as the join needs it: no questions (a changed conffile keeps the box's own copy), and a lock held
# by someone else waited for, within the step's budget: a box reinstalled moments ago runs
# unattended-upgrades at its first boot, exactly when the join runs.
apt_get() {
  as_root env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "$@"
}

# apt-get update takes the package lists' lock without waiting (DPkg::Lock::Timeout covers dpkg's locks
# only): while another apt run holds it (apt-daily, cloud-init's package update at first boot), it
# fails at once. Try again for up to two minutes; any other failure stops the join.
apt_update() {
  local waited=0 out
  while true; do
    if out=$(apt_get update -q 2>&1); then
      printf '%s\n' "$out"
      return 0
    fi
    printf '%s\n' "$out" >&2
    case $out in
      *"Could not get lock /var/lib/apt/lists/lock"*) ;;
      *) return 1 ;;
    esac
    if ((waited >= 120)); then return 1; fi
    sleep 5
    waited=$((waited + 5))
  done
}

# A dpkg run stopped half-way (a join cut at its step's budget, a box powered off mid-upgrade) leaves its
# journal, and every apt-get install then refuses. Finish it first, waiting out dpkg's lock (dpkg takes
# it without waiting) for up to two minutes.
dpkg_recover() {
  local waited=0
  [ -n "$(as_root ls -A /var/lib/dpkg/updates 2>/dev/null)" ] || return 0
  until as_root env DEBIAN_FRONTEND=noninteractive dpkg --force-confdef --force-confold --configure -a; do
    if ((waited >= 120)); then return 1; fi
    sleep 5
    waited=$((waited + 5))
  done
}

# /data is its own filesystem (not a directory of /): then the kubelet and containerd roots live there.
data_is_separate() {
  mountpoint -q /data && [ "$(findmnt -n -o SOURCE /data)" != "$(findmnt -n -o SOURCE /)" ]
}

# 1. Passwordless sudo first, so nothing later needs the password. The password goes to sudo -S on
#    stdin through a builtin printf, with tracing off so it never reaches the output.
if [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
  set +x
  if [ -z "$SUDO_PASSWORD" ]; then
    echo "self-join: $(id -un) has no passwordless sudo and no sudo password was given" >&2
    exit 1
  fi
  login=$(id -un)
  printf '%s\n' "$SUDO_PASSWORD" | sudo -S -p '' sh -c \
    "printf '%s\n' '$login ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/90-$login-nopasswd && chmod 0440 /etc/sudoers.d/90-$login-nopasswd"
  set -x
fi
unset SUDO_PASSWORD

# 2. Directories.
as_root mkdir -p /var/lib/kubelet /etc/modules-load.d /etc/sysctl.d /etc/systemd/system /opt /etc/kubernetes/pki

# 3. Bind the kubelet root onto /data BEFORE writing its config: written first, config.yaml and the
#    kubeconfig ended up hidden under the later mount and the kubelet crash-looped.
if data_is_separate; then
  as_root mkdir -p /data/kubelet
  fstab_line='/data/kubelet /var/lib/kubelet none bind,nofail 0 0'
  if ! grep -qxF "$fstab_line" /etc/fstab; then
    printf '%s\n' "$fstab_line" | as_root tee -a /etc/fstab >/dev/null
  fi
  if ! mountpoint -q /var/lib/kubelet; then
    as_root mount --bind /data/kubelet /var/lib/kubelet
  fi
fi

# 4. Files. The bootstrap kubeconfig carries the short-lived bootstrap token: tracing off, mode 0600.
#    The kubelet trades it for its own certificate (system:node:<name>), so NodeRestriction applies.
set +x
umask 077
put /var/lib/kubelet/bootstrap-kubeconfig 0600 <<EOF
apiVersion: v1
kind: Config
clusters:
- name: cluster
  cluster:
    server: ${API_SERVER}
    certificate-authority-data: ${CA_BUNDLE_B64}
contexts:
- name: kubelet-bootstrap
  context:
    cluster: cluster
    user: kubelet-bootstrap
current-context: kubelet-bootstrap
users:
- name: kubelet-bootstrap
  user:
    token: ${BOOTSTRAP_TOKEN}
EOF
umask 022
unset BOOTSTRAP_TOKEN
set -x

printf '%s' "$CA_BUNDLE_B64" | base64 -d | put /etc/kubernetes/pki/ca.crt 0644
# A new cluster CA (the box joins another cluster), or another API server: the kubeconfig and client
# certificate the kubelet holds name the old ones and would still look valid to it, so it would never
# read the bootstrap kubeconfig again. Without them it bootstraps anew (and restarts, below).
kubelet_server=$(as_root sed -n 's/^[[:space:]]*server:[[:space:]]*//p' /var/lib/kubelet/kubeconfig 2>/dev/null || true)
if owed rebootstrap || { [ -n "$kubelet_server" ] && [ "$kubelet_server" != "$API_SERVER" ]; }; then
  owe kubelet
  as_root sh -c 'rm -f /var/lib/kubelet/kubeconfig /var/lib/kubelet/pki/kubelet-client-*.pem'
  paid rebootstrap
fi

put /etc/modules-load.d/k8s.conf 0644 <<'EOF'
overlay
br_netfilter
EOF

put /etc/sysctl.d/99-k8s.conf 0644 <<'EOF'
net.bridge.bridge-nf-call-iptables=1
net.bridge.bridge-nf-call-ip6tables=1
net.ipv4.ip_forward=1
EOF

# Labels from the image (a Robot box's post-install writes /etc/tuist/node-labels) join the given ones.
labels=$NODE_LABELS
if [ -f /etc/tuist/node-labels ]; then
  while IFS= read -r label; do
    [ -n "$label" ] && case ",$labels," in *",$label,"*) ;; *) labels="$labels,$label" ;; esac
  done </etc/tuist/node-labels
fi

kubelet_flags=(
  --bootstrap-kubeconfig=/var/lib/kubelet/bootstrap-kubeconfig
  --kubeconfig=/var/lib/kubelet/kubeconfig
  --config=/var/lib/kubelet/config.yaml
  --cert-dir=/var/lib/kubelet/pki
  --container-runtime-endpoint=unix:///run/containerd/containerd.sock
  --hostname-override="$NODE_NAME"
  --node-ip="$NODE_IP"
  --provider-id="$PROVIDER_ID"
  --node-labels="$labels"
)
if [ -n "$NODE_TAINTS" ]; then kubelet_flags+=(--register-with-taints="$NODE_TAINTS"); fi

{
  cat <<'EOF'
[Unit]
Description=kubelet: the Kubernetes node agent (self-joined by tuist-infra)
Documentation=https://kubernetes.io/docs/
Wants=network-online.target containerd.service
After=network-online.target containerd.service
EOF
  # The bind of its root onto /data is `nofail` (a box still boots without /data): the kubelet waits
  # for it, and does not start on the empty directory under it.
  if data_is_separate; then printf 'RequiresMountsFor=/var/lib/kubelet\n'; fi
  cat <<'EOF'

[Service]
EOF
  printf 'ExecStart=/usr/bin/kubelet'
  printf ' \\\n    %s' "${kubelet_flags[@]}"
  printf '\n'
  cat <<'EOF'
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF
} | put /etc/systemd/system/kubelet.service 0644

# No serverTLSBootstrap: kube-controller-manager never approves kubernetes.io/kubelet-serving CSRs,
# and nothing in these clusters does, so the kubelet would wait for a serving certificate and serve
# nothing on :10250 (no `kubectl logs`, `exec` or metrics). Without it the kubelet serves with a
# self-signed certificate, which the apiserver accepts as long as it runs without
# --kubelet-certificate-authority (kubeadm's default). Turn it on only together with a serving-CSR
# approver that checks each CSR's addresses against its Node's.
{
  cat <<'EOF'
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
runtimeRequestTimeout: 5m
rotateCertificates: true
# What the box's own daemons keep (sshd, journald; kubelet, containerd): off allocatable, so the
# scheduler never fills the box to its last MiB. components/capacity.py counts with the same numbers.
systemReserved:
  cpu: 500m
  memory: 1Gi
kubeReserved:
  cpu: 500m
  memory: 1Gi
EOF
  printf 'clusterDomain: %s\n' "$CLUSTER_DOMAIN"
  if [ -n "$CLUSTER_DNS" ]; then printf 'clusterDNS:\n- %s\n' "$CLUSTER_DNS"; fi
  # Ubuntu's /etc/resolv.conf names systemd-resolved's stub, 127.0.0.53, which no pod can reach from
  # its own network namespace (CoreDNS would forward to itself and stop on its loop check): pods get
  # the upstream servers resolved uses instead, as kubeadm sets it.
  if [ -f /run/systemd/resolve/resolv.conf ]; then printf 'resolvConf: /run/systemd/resolve/resolv.conf\n'; fi
} | put /var/lib/kubelet/config.yaml 0644

# 7. No swap, and the kernel modules the CNI needs.
as_root swapoff -a
as_root sed -i -E 's|^([^#].*[[:space:]]swap[[:space:]].*)$|#\1|' /etc/fstab
as_root modprobe overlay
as_root modprobe br_netfilter

# 8. Stale Cilium drop-ins from a previous join name interfaces that no longer exist: `sysctl --system`
#    then fails with a cannot-stat error and aborts the re-join. Remove them first.
as_root rm -f /etc/sysctl.d/*cilium* /etc/sysctl.d/*-cilium.conf
as_root sysctl --system

# 9.-11. containerd: Ubuntu's package, or the one a Robot box's post-install baked in with Kata.
dpkg_recover
apt_update
if [ "$CONTAINERD_SOURCE" = apt ]; then
  apt_get install -y -q apt-transport-https ca-certificates curl gpg containerd
  containerd_config=$(containerd config default)
  containerd_config=$(printf '%s\n' "$containerd_config" | sed -E \
    -e 's/SystemdCgroup = false/SystemdCgroup = true/' \
    -e '/\[plugins\."io\.containerd\.grpc\.v1\.cri"\.registry\]/,/config_path/ s|config_path = ""|config_path = "/etc/containerd/certs.d"|')
else
  apt_get install -y -q apt-transport-https ca-certificates curl gpg
  if [ ! -f /etc/containerd/config.toml ]; then
    echo "self-join: CONTAINERD_SOURCE=preinstalled but /etc/containerd/config.toml is missing" >&2
    exit 1
  fi
  containerd_config=$(as_root cat /etc/containerd/config.toml)
fi
put /etc/containerd/certs.d/docker.io/hosts.toml 0644 <<'EOF'
server = "https://registry-1.docker.io"

[host."https://mirror.gcr.io"]
  capabilities = ["pull", "resolve"]
EOF
# The containerd root moves to /data only when /data is its own filesystem.
if data_is_separate; then
  as_root mkdir -p /data/containerd
  containerd_config=$(printf '%s\n' "$containerd_config" | sed -E "s|^root = ['\"]/var/lib/containerd['\"]|root = \"/data/containerd\"|")
fi
printf '%s\n' "$containerd_config" | put /etc/containerd/config.toml 0644
# A running containerd restarts only when its config changed (this run, or one that stopped before
# its restart): a needless restart bounces every pod.
if systemctl is-active --quiet containerd && owed containerd; then
  as_root systemctl restart containerd
fi
as_root systemctl enable --now containerd
paid containerd

# 12. The Kubernetes apt repository for the control plane's minor.
as_root mkdir -p -m 0755 /etc/apt/keyrings
curl -fsSL --connect-timeout 20 --max-time 60 --retry 5 --retry-delay 5 \
  "https://pkgs.k8s.io/core:/stable:/${K8S_MINOR}/deb/Release.key" |
  as_root gpg --dearmor --batch --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg
printf 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/%s/deb/ /\n' \
  "$K8S_MINOR" | put /etc/apt/sources.list.d/kubernetes.list 0644
apt_update

# 13. The kubelet, held at this minor; it registers itself through the bootstrap token. A rejoin for a
#     new kubernetes_minor moves the held package on purpose (apt refuses that unless told), and a new
#     kubelet binary counts as a change: the running kubelet restarts onto it.
kubelet_version() { dpkg -s kubelet 2>/dev/null | sed -n 's/^Version: //p' || true; }
kubelet_before=$(kubelet_version)
apt_get install -y -q --allow-change-held-packages kubelet
as_root apt-mark hold kubelet
[ "$(kubelet_version)" = "$kubelet_before" ] || owe kubelet
as_root systemctl daemon-reload
if systemctl is-active --quiet kubelet && owed kubelet; then
  as_root systemctl restart kubelet
fi
as_root systemctl enable --now kubelet
paid kubelet
set +x
echo "self-join: ${NODE_NAME} configured"
