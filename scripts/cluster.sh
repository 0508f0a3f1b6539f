#!/usr/bin/env bash
# A real Kubernetes control plane on loopback: etcd (Debian's etcd-server), and kube-apiserver,
# kube-controller-manager and kube-scheduler built from k8s.io/kubernetes by scripts/bootstrap.sh.
#
#   scripts/cluster.sh start      [--dir DIR] [--cloud-workers N] [--node-monitor-grace-period D]
#                                 [--signing-duration D] [--apiserver-port P] [--platform]
#   scripts/cluster.sh stop       [--dir DIR]
#   scripts/cluster.sh status     [--dir DIR]
#   scripts/cluster.sh kubeconfig [--dir DIR]     prints the admin kubeconfig's path
#
# DIR (default build/cluster) holds everything: pki/ (a CA, serving and client certificates, the
# service-account keys, made with openssl), etcd/ (the data), one log per process in logs/, pids/,
# ports.env and admin.kubeconfig (system:masters). Ports are picked free at the first start and
# kept, so several clusters run side by side and a restarted one keeps its address (boxes hold
# kubeconfigs that point at it); --apiserver-port fixes the API server's (the dev stack's
# Pulumi.dev.yaml names https://127.0.0.1:6443, in a network namespace of its own: scripts/netns.sh).
# Everything binds 127.0.0.1. --platform also installs what the real clusters' platform installs
# before this program runs: Cilium's CRDs, as published (scripts/cluster-platform/).
#
# The API server runs as a production cluster's does for joining nodes: Node,RBAC authorization, the
# NodeRestriction admission plugin, bootstrap-token authentication, and kubelet addresses preferred
# InternalIP first (seed 001). The controller manager signs and approves node CSRs (csrsigning,
# csrapproving), runs the bootstrapsigner and tokencleaner, allocates pod CIDRs, and uses a service
# account per controller. --cloud-workers N also starts N kubelet stand-ins, cloud-worker-<i>, that
# join through the same TLS bootstrap with a kubeadm-style token and the RBAC kubeadm init creates:
# the seeds' Hetzner Cloud workers, where the controllers run. Their node IPs are 198.18.0.10<i>, in
# the box network (scripts/netns.sh): the API server accepts those in EndpointSlices, not loopback.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"

trap 'printf "cluster: %s failed at line %s\n" "${BASH_COMMAND%% *}" "$LINENO" >&2' ERR
usage() { sed -n '5,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { printf 'cluster: %s\n' "$*" >&2; exit 1; }

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
dir=$TUIST_ROOT/build/cluster
cloud_workers=0
grace=20s
signing_duration=8760h
apiserver_port=
platform=0
while [ $# -gt 0 ]; do
    case $1 in
        --dir) dir=${2:?--dir needs a directory}; shift 2 ;;
        --cloud-workers) cloud_workers=${2:?--cloud-workers needs a number}; shift 2 ;;
        --node-monitor-grace-period) grace=${2:?}; shift 2 ;;
        --signing-duration) signing_duration=${2:?}; shift 2 ;;
        --apiserver-port) apiserver_port=${2:?--apiserver-port needs a port}; shift 2 ;;
        --platform) platform=1; shift ;;
        *) usage ;;
    esac
done
[[ $cloud_workers =~ ^[0-9]+$ ]] || die "--cloud-workers $cloud_workers is not a number"
[ -z "$apiserver_port" ] || [[ $apiserver_port =~ ^[0-9]+$ && $apiserver_port -ge 1 && $apiserver_port -le 65535 ]] ||
    die "--apiserver-port $apiserver_port is not a TCP port"
PLATFORM_DIR=$here/cluster-platform
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pki=$dir/pki
SERVICE_CIDR=10.96.0.0/16
CLUSTER_CIDR=10.244.0.0/16
CLUSTER_DNS=10.96.0.10
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler)

# --- processes ----------------------------------------------------------------------------------

# pid_of NAME: the pid of a component this cluster started, if it still runs (its command line
# names this cluster's directory, so a recycled pid is never taken for it).
pid_of() {
    local pid
    pid=$(cat "$dir/pids/$1.pid" 2>/dev/null) || return 1
    [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline" | grep -qF -- "$dir/" && echo "$pid"
}

# launch NAME CMD...: starts CMD in a session (and process group) of its own, logging to logs/NAME.log.
launch() {
    local name=$1 pid
    shift
    mkdir -p "$dir/logs" "$dir/pids"
    setsid "$@" </dev/null >>"$dir/logs/$name.log" 2>&1 &
    pid=$!
    echo "$pid" >"$dir/pids/$name.pid"
    # Until the shell forked above has exec'd CMD, its command line is this script's and pid_of does
    # not know it (on a loaded machine the first health poll came that early and read "exited"):
    # return once CMD runs, or once it has gone (exited: a zombie until this shell reaps it).
    local deadline=$((SECONDS + 10)) state
    while ! pid_of "$name" >/dev/null && [ "$SECONDS" -lt "$deadline" ]; do
        state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)
        if [ -z "$state" ] || [ "$state" = Z ]; then break; fi
        sleep 0.05
    done
}

# stop_one NAME: SIGTERM its process group, SIGKILL after 15s, and wait until it is gone.
stop_one() {
    local name=$1 pid
    pid=$(pid_of "$name") || { rm -f "$dir/pids/$name.pid"; return 0; }
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$dir/pids/$name.pid"
}

all_names() {
    local f
    for f in "$dir"/pids/*.pid; do
        [ -e "$f" ] && basename "$f" .pid
    done
}

# wait_for WHAT SECONDS NAME CMD...: polls CMD until it succeeds; if NAME exits or the time runs out,
# shows its log and fails.
wait_for() {
    local what=$1 seconds=$2 name=$3
    shift 3
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if ! pid_of "$name" >/dev/null; then
            tail -n 30 "$dir/logs/$name.log" >&2 || true
            die "$name exited while waiting for $what (log: $dir/logs/$name.log)"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 30 "$dir/logs/$name.log" >&2 || true
            die "$what: not within ${seconds}s (log: $dir/logs/$name.log)"
        fi
        sleep 0.3
    done
}

# --- certificates -------------------------------------------------------------------------------

# cert NAME SUBJECT [SAN]: a key and a certificate signed by the cluster CA (client and server use).
cert() {
    local name=$1 subject=$2 san=${3:-}
    [ -f "$pki/$name.crt" ] && return 0
    openssl ecparam -name prime256v1 -genkey -noout -out "$pki/$name.key" 2>/dev/null
    openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr" 2>/dev/null
    {
        echo "basicConstraints=critical,CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=serverAuth,clientAuth"
        [ -z "$san" ] || echo "subjectAltName=$san"
    } >"$pki/$name.ext"
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
        -days 3650 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
    rm -f "$pki/$name.csr" "$pki/$name.ext"
    chmod 600 "$pki/$name.key"
}

make_pki() {
    mkdir -p "$pki"
    chmod 700 "$pki"
    if [ ! -f "$pki/ca.crt" ]; then
        openssl ecparam -name prime256v1 -genkey -noout -out "$pki/ca.key" 2>/dev/null
        openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=kubernetes" -days 3650 -sha256 \
            -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
            -out "$pki/ca.crt" 2>/dev/null
        chmod 600 "$pki/ca.key"
    fi
    cert apiserver "/CN=kube-apiserver" \
        "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    cert apiserver-kubelet-client "/O=kubeadm:cluster-admins/CN=kube-apiserver-kubelet-client"
    cert admin "/O=system:masters/CN=kubernetes-admin"
    cert controller-manager "/CN=system:kube-controller-manager"
    cert scheduler "/CN=system:kube-scheduler"
    sa_keys
}

# sa_keys: the service-account signing key pair, sa.key and sa.pub, made afresh unless both are
# there. Both are written to temporary files first and the old pair removed before either is moved
# in, so an interrupted run leaves one of them missing (made afresh next time), never a sa.key
# without its sa.pub or a pair that does not match.
sa_keys() {
    if [ -f "$pki/sa.key" ] && [ -f "$pki/sa.pub" ]; then return 0; fi
    rm -f "$pki/sa.key.tmp" "$pki/sa.pub.tmp"
    (umask 077 && openssl genrsa -out "$pki/sa.key.tmp" 2048 2>/dev/null)
    openssl rsa -in "$pki/sa.key.tmp" -pubout -out "$pki/sa.pub.tmp" 2>/dev/null
    rm -f "$pki/sa.key" "$pki/sa.pub"
    mv "$pki/sa.key.tmp" "$pki/sa.key"
    mv "$pki/sa.pub.tmp" "$pki/sa.pub"
}

# kubeconfig FILE USER-CERT: a kubeconfig for the API server with a client certificate, inline.
kubeconfig_for() {
    local file=$1 user=$2
    umask 077
    cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
contexts:
- name: local
  context:
    cluster: local
    user: $user
current-context: local
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 "$pki/$user.crt")
    client-key-data: $(base64 -w0 "$pki/$user.key")
EOF
    umask 022
}

# --- ports --------------------------------------------------------------------------------------

PORT_VARS=(ETCD_PORT ETCD_PEER_PORT APISERVER_PORT CONTROLLER_MANAGER_PORT SCHEDULER_PORT)

# ports_complete: ports.env is there and sets every port (one written in place by an interrupted
# start, before ports.env was written whole, may be empty or set only some).
ports_complete() {
    local v
    [ -f "$dir/ports.env" ] || return 1
    for v in "${PORT_VARS[@]}"; do
        grep -qE "^$v=[0-9]+\$" "$dir/ports.env" || return 1
    done
}

pick_ports() {
    if ! ports_complete; then
        if [ -f "$dir/ports.env" ]; then
            echo "cluster: $dir/ports.env does not set every port (an interrupted start?): picking them afresh" >&2
        fi
        pick_free_ports
    fi
    # shellcheck source=/dev/null
    . "$dir/ports.env"
    if [ -n "$apiserver_port" ] && [ "$apiserver_port" != "$APISERVER_PORT" ]; then
        if pid_of kube-apiserver >/dev/null; then
            die "the API server of $dir runs on port $APISERVER_PORT; stop it before moving it to $apiserver_port"
        fi
        sed -i "s/^APISERVER_PORT=.*/APISERVER_PORT=$apiserver_port/" "$dir/ports.env"
        APISERVER_PORT=$apiserver_port
    fi
}

pick_free_ports() {
    local tmp
    # Written whole or not at all: a temporary file in the same directory, then renamed.
    tmp=$(mktemp "$dir/.ports.env.XXXXXX")
    # Bound all at once, so the five are distinct; released just before the processes bind them.
    if ! python3 - "${PORT_VARS[@]}" >"$tmp" <<'EOF'
import socket, sys
socks = []
for name in sys.argv[1:]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
    print(f"{name}={s.getsockname()[1]}")
EOF
    then
        rm -f "$tmp"
        die "could not pick free ports for $dir"
    fi
    chmod 644 "$tmp"
    mv -f "$tmp" "$dir/ports.env"
}

port_free() { python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null; }

# --- start --------------------------------------------------------------------------------------

need_bin() {
    command -v "$1" >/dev/null || die "$1 is not on PATH: run scripts/bootstrap.sh ($2)"
}

start() {
    need_bin etcd "Debian's etcd-server"
    need_bin kube-apiserver "the kubernetes control plane stage"
    need_bin kube-controller-manager "the kubernetes control plane stage"
    need_bin kube-scheduler "the kubernetes control plane stage"
    need_bin kubectl "the kubernetes control plane stage"
    if [ "$cloud_workers" -gt 0 ]; then need_bin kubelet-standin "the kubernetes control plane stage"; fi
    make_pki
    pick_ports
    kubeconfig_for "$dir/admin.kubeconfig" admin
    kubeconfig_for "$dir/controller-manager.kubeconfig" controller-manager
    kubeconfig_for "$dir/scheduler.kubeconfig" scheduler
    local kc=(kubectl --kubeconfig "$dir/admin.kubeconfig" --request-timeout 5s)

    if ! pid_of etcd >/dev/null; then
        for p in "$ETCD_PORT" "$ETCD_PEER_PORT"; do port_free "$p" || die "port $p (etcd) is taken; stop whatever holds it or remove $dir/ports.env"; done
        launch etcd etcd --name default --data-dir "$dir/etcd" \
            --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
            --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
            --initial-cluster "default=http://127.0.0.1:$ETCD_PEER_PORT" --logger zap --log-outputs stderr
    fi
    wait_for "etcd health" 30 etcd python3 -c 'import sys,urllib.request; sys.exit(b"true" not in urllib.request.urlopen(sys.argv[1], timeout=2).read())' \
        "http://127.0.0.1:$ETCD_PORT/health"

    if ! pid_of kube-apiserver >/dev/null; then
        port_free "$APISERVER_PORT" || die "port $APISERVER_PORT (kube-apiserver) is taken"
        launch kube-apiserver kube-apiserver \
            --advertise-address=127.0.0.1 --bind-address=127.0.0.1 --secure-port="$APISERVER_PORT" \
            --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
            --client-ca-file="$pki/ca.crt" --tls-cert-file="$pki/apiserver.crt" --tls-private-key-file="$pki/apiserver.key" \
            --kubelet-client-certificate="$pki/apiserver-kubelet-client.crt" --kubelet-client-key="$pki/apiserver-kubelet-client.key" \
            --kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname \
            --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction --enable-bootstrap-token-auth \
            --service-account-issuer=https://kubernetes.default.svc.cluster.local \
            --service-account-key-file="$pki/sa.pub" --service-account-signing-key-file="$pki/sa.key" \
            --service-cluster-ip-range="$SERVICE_CIDR" --allow-privileged=true \
            --endpoint-reconciler-type=none --profiling=false
    fi
    wait_for "kube-apiserver readyz" 120 kube-apiserver "${kc[@]}" get --raw /readyz

    if ! pid_of kube-controller-manager >/dev/null; then
        port_free "$CONTROLLER_MANAGER_PORT" || die "port $CONTROLLER_MANAGER_PORT (kube-controller-manager) is taken"
        launch kube-controller-manager kube-controller-manager \
            --kubeconfig="$dir/controller-manager.kubeconfig" \
            --authentication-kubeconfig="$dir/controller-manager.kubeconfig" --authorization-kubeconfig="$dir/controller-manager.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" --leader-elect=false \
            --controllers='*,bootstrapsigner,tokencleaner' \
            --cluster-signing-cert-file="$pki/ca.crt" --cluster-signing-key-file="$pki/ca.key" \
            --cluster-signing-duration="$signing_duration" \
            --root-ca-file="$pki/ca.crt" --service-account-private-key-file="$pki/sa.key" \
            --use-service-account-credentials=true \
            --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
            --service-cluster-ip-range="$SERVICE_CIDR" \
            --node-monitor-grace-period="$grace" --node-monitor-period=2s
    fi
    if ! pid_of kube-scheduler >/dev/null; then
        port_free "$SCHEDULER_PORT" || die "port $SCHEDULER_PORT (kube-scheduler) is taken"
        launch kube-scheduler kube-scheduler \
            --kubeconfig="$dir/scheduler.kubeconfig" \
            --authentication-kubeconfig="$dir/scheduler.kubeconfig" --authorization-kubeconfig="$dir/scheduler.kubeconfig" \
            --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false
    fi
    # Ready to serve: both loops report healthy and the default service account exists (the
    # service-account controller runs), so a test can create pods at once.
    wait_for "kube-controller-manager healthz" 60 kube-controller-manager \
        python3 -c 'import ssl,sys,urllib.request; urllib.request.urlopen(sys.argv[1], context=ssl._create_unverified_context(), timeout=2)' \
        "https://127.0.0.1:$CONTROLLER_MANAGER_PORT/healthz"
    wait_for "kube-scheduler healthz" 60 kube-scheduler \
        python3 -c 'import ssl,sys,urllib.request; urllib.request.urlopen(sys.argv[1], context=ssl._create_unverified_context(), timeout=2)' \
        "https://127.0.0.1:$SCHEDULER_PORT/healthz"
    wait_for "the default service account" 60 kube-controller-manager "${kc[@]}" -n default get serviceaccount default

    # kubeadm's cluster-info in kube-public: the bootstrapsigner signs it for each bootstrap token.
    "${kc[@]}" -n kube-public create configmap cluster-info \
        --from-literal=kubeconfig="$(cluster_info_kubeconfig)" --dry-run=client -o yaml | "${kc[@]}" apply -f - >/dev/null

    if [ "$platform" -eq 1 ]; then install_platform; fi
    if [ "$cloud_workers" -gt 0 ]; then start_cloud_workers; fi
    echo "cluster: https://127.0.0.1:$APISERVER_PORT (kubeconfig: $dir/admin.kubeconfig)"
}

cluster_info_kubeconfig() {
    cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: ""
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
contexts: []
users: []
EOF
}

# --- the platform -------------------------------------------------------------------------------

# What the real clusters carry before this program's first `pulumi up` (Cilium, their CNI, installs
# its CRDs): each published CRD in scripts/cluster-platform, applied and Established.
install_platform() {
    local kc=(kubectl --kubeconfig "$dir/admin.kubeconfig" --request-timeout 10s) f name
    for f in "$PLATFORM_DIR"/*.yaml; do
        "${kc[@]}" apply --server-side --field-manager=cluster-platform -f "$f" >/dev/null
        name=$(basename "$f" .yaml)
        # Polled: right after the apply the API server's cache may not show the CRD yet, and
        # `kubectl wait` on a name it cannot find fails at once.
        wait_for "crd/$name Established" 120 kube-apiserver \
            "${kc[@]}" wait --for=condition=Established --timeout=5s "crd/$name"
    done
}

# --- cloud workers ------------------------------------------------------------------------------

# What kubeadm init leaves for its default node token: bootstrappers may create CSRs, their client
# CSRs are auto-approved, and nodes may renew their own client certificates.
KUBEADM_RBAC=$(cat <<'EOF'
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:kubelet-bootstrap"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:node-bootstrapper"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:bootstrappers:kubeadm:default-node-token"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:node-autoapprove-bootstrap"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:nodeclient"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:bootstrappers:kubeadm:default-node-token"}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "kubeadm:node-autoapprove-certificate-rotation"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: Group, name: "system:nodes"}]
EOF
)

start_cloud_workers() {
    local kc=(kubectl --kubeconfig "$dir/admin.kubeconfig" --request-timeout 5s) token_id token_secret i w name
    printf '%s\n' "$KUBEADM_RBAC" | "${kc[@]}" apply -f - >/dev/null
    if [ ! -f "$dir/workers/token" ]; then
        mkdir -p "$dir/workers"
        token_id=$(openssl rand -hex 3)
        token_secret=$(openssl rand -hex 8)
        (umask 077 && printf '%s.%s\n' "$token_id" "$token_secret" >"$dir/workers/token")
    fi
    IFS=. read -r token_id token_secret <"$dir/workers/token"
    "${kc[@]}" -n kube-system create secret generic "bootstrap-token-$token_id" --type bootstrap.kubernetes.io/token \
        --from-literal=token-id="$token_id" --from-literal=token-secret="$token_secret" \
        --from-literal=usage-bootstrap-authentication=true --from-literal=usage-bootstrap-signing=true \
        --from-literal=auth-extra-groups=system:bootstrappers:kubeadm:default-node-token \
        --from-literal=description="cloud workers of scripts/cluster.sh" \
        --dry-run=client -o yaml | "${kc[@]}" apply -f - >/dev/null
    for i in $(seq 1 "$cloud_workers"); do
        name=cloud-worker-$i
        w=$dir/workers/$name
        pid_of "$name" >/dev/null && continue
        mkdir -p "$w/proc" "$w/pki" "$w/root"
        # A Hetzner Cloud CX32: 4 vCPUs, 8 GiB (the stand-in reads them as it reads /proc on a box).
        for c in 0 1 2 3; do printf 'processor\t: %s\nmodel name\t: AMD EPYC Processor\n\n' "$c"; done >"$w/proc/cpuinfo"
        printf 'MemTotal:        8009912 kB\n' >"$w/proc/meminfo"
        (umask 077 && cat >"$w/bootstrap-kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: https://127.0.0.1:${APISERVER_PORT}
    certificate-authority-data: $(base64 -w0 "$pki/ca.crt")
contexts:
- name: kubelet-bootstrap
  context: {cluster: local, user: kubelet-bootstrap}
current-context: kubelet-bootstrap
users:
- name: kubelet-bootstrap
  user: {token: ${token_id}.${token_secret}}
EOF
        )
        cat >"$w/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: systemd
clusterDNS:
- ${CLUSTER_DNS}
clusterDomain: cluster.local
rotateCertificates: true
EOF
        launch "$name" kubelet-standin \
            --bootstrap-kubeconfig="$w/bootstrap-kubeconfig" --kubeconfig="$w/kubeconfig" --config="$w/config.yaml" \
            --cert-dir="$w/pki" --root-dir="$w/root" --sim-proc-dir="$w/proc" \
            --hostname-override="$name" --node-ip="198.18.0.$((100 + i))" --provider-id="hcloud://$((1000 + i))" \
            --node-labels="node.kubernetes.io/instance-type=cx32,node.cluster.x-k8s.io/pool=cloud-workers"
    done
    for i in $(seq 1 "$cloud_workers"); do
        wait_for "node cloud-worker-$i Ready" 90 "cloud-worker-$i" \
            "${kc[@]}" wait --for=condition=Ready "node/cloud-worker-$i" --timeout=1s
    done
}

# --- status / stop ------------------------------------------------------------------------------

status() {
    local name pid any=0 down=0
    if ports_complete; then
        # shellcheck source=/dev/null
        . "$dir/ports.env"
        echo "api server: https://127.0.0.1:$APISERVER_PORT   kubeconfig: $dir/admin.kubeconfig"
    elif [ -f "$dir/ports.env" ]; then
        echo "ports: $dir/ports.env does not set every port (the next start picks them afresh)"
    fi
    for name in "${COMPONENTS[@]}" $(all_names | grep -vxF -e etcd -e kube-apiserver -e kube-controller-manager -e kube-scheduler || true); do
        if pid=$(pid_of "$name"); then
            printf '%-26s running (pid %s)\n' "$name" "$pid"
            any=1
        else
            printf '%-26s stopped\n' "$name"
            down=1
        fi
    done
    [ "$any" -eq 1 ] && [ "$down" -eq 0 ]
}

stop() {
    local name
    # Nodes first, the API server before etcd: each stops while what it talks to still answers. The
    # ones that talk only to the API server stop side by side (each takes about 2 s to shut down, so
    # one after another a test session's last teardown waited 10 to 18 s).
    for name in $(all_names | grep -vxF -e etcd -e kube-apiserver -e kube-controller-manager -e kube-scheduler || true); do
        stop_one "$name" &
    done
    wait
    stop_one kube-scheduler &
    stop_one kube-controller-manager &
    wait
    stop_one kube-apiserver
    stop_one etcd
}

case $cmd in
    start) start ;;
    stop) stop ;;
    status) if status; then exit 0; else exit 1; fi ;;
    kubeconfig) [ -f "$dir/admin.kubeconfig" ] || die "no cluster in $dir (run: scripts/cluster.sh start --dir $dir)"; echo "$dir/admin.kubeconfig" ;;
    *) usage ;;
esac
