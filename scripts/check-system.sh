#!/usr/bin/env bash
# Checks the capabilities the tests and the main job rely on, not just package
# names: nginx loads a stream config with ssl_preread, sshd accepts a box-style
# config, nss_wrapper preloads, and so on. Prints one line per miss naming the
# Debian package that provides it, and exits non-zero if anything is missing.
# Usage: bash scripts/check-system.sh
set -uo pipefail

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
misses=0
# Some checks need root (a private mount namespace, sshd in it): a GitHub runner's set-up runs as its
# own user and leaves them to the test run, which runs as root (scripts/netns.sh).
as_root=; [ "$(id -u)" = 0 ] && as_root=1
miss() { printf 'missing: %s (install the Debian package %s)\n' "$1" "$2" >&2; misses=$((misses + 1)); }

# nginx with the stream module and ssl_preread: the peer demux's whole job.
stream_module=/usr/lib/nginx/modules/ngx_stream_module.so
{
    [ -f "$stream_module" ] && echo "load_module $stream_module;"
    cat <<'CONF'
pid nginx.pid;
error_log stderr;
events {}
stream {
    map $ssl_preread_server_name $backend { default ""; }
    server { listen unix:@TMP@/demux.sock; ssl_preread on; proxy_pass $backend; }
}
CONF
} | sed "s|@TMP@|$tmp|" > "$tmp/nginx.conf"  # a socket of its own: nginx -t binds, root or not
if ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ]; then
    miss "nginx" nginx
elif ! /usr/sbin/nginx -t -q -e stderr -p "$tmp" -c "$tmp/nginx.conf" >/dev/null 2>&1; then
    miss "nginx stream module with ssl_preread (nginx -t failed on a stream {} config)" libnginx-mod-stream
fi

# OpenSSH: each simulated box runs a real sshd; tests dial it with the client.
if [ ! -x /usr/sbin/sshd ]; then
    miss "sshd" openssh-server
elif [ -z "$as_root" ]; then
    echo "check-system: not root: sshd -t in a mount namespace is left to the tests (run as root)" >&2
else
    ssh-keygen -q -t ed25519 -N '' -f "$tmp/host_key" >/dev/null 2>&1
    printf 'HostKey %s\nListenAddress 127.0.0.1:1\nPidFile %s/sshd.pid\nStrictModes no\nPasswordAuthentication no\nUsePAM no\n' \
        "$tmp/host_key" "$tmp" > "$tmp/sshd_config"
    # As vendorsim runs it: in a mount namespace with a /run of its own (sshd needs /run/sshd).
    # shellcheck disable=SC2016  # "$0" is expanded by the inner shell
    unshare --mount --propagation private -- /bin/sh -c \
        'mount -t tmpfs -o mode=755 tmpfs /run && mkdir -m 755 /run/sshd && exec /usr/sbin/sshd -t -f "$0"' \
        "$tmp/sshd_config" >/dev/null 2>&1 || miss "sshd that accepts the box config (sshd -t failed)" openssh-server
fi
if ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then miss "ssh, ssh-keygen" openssh-client; fi

# nss_wrapper: lets each box's sshd see its login user without touching /etc/passwd.
nss=/usr/lib/x86_64-linux-gnu/libnss_wrapper.so
if [ ! -f "$nss" ] || ! LD_PRELOAD="$nss" /bin/true 2>/dev/null; then
    miss "libnss_wrapper.so (LD_PRELOAD)" libnss-wrapper
fi

command -v shellcheck >/dev/null || miss "shellcheck" shellcheck
printf 'x' | zstd -q -c >/dev/null 2>&1 || miss "zstd" zstd
unshare --help >/dev/null 2>&1 || miss "unshare" util-linux
ip -V >/dev/null 2>&1 || miss "ip" iproute2
# The boxes' sandbox enters a private mount namespace: a kernel or sandbox that
# forbids it cannot run simulated boxes at all.
if [ -n "$as_root" ]; then
    unshare --mount --propagation private /bin/true 2>/dev/null ||
        miss "private mount namespaces (unshare --mount failed)" util-linux
fi
# etcd for the local Kubernetes control plane (scripts/cluster.sh): a v3 server.
etcd_version=$(etcd --version 2>/dev/null || true)
if [[ $etcd_version != "etcd Version: 3."* ]]; then
    miss "etcd v3 server (etcd --version)" etcd-server
fi
# openssl makes the control plane's certificates.
openssl version >/dev/null 2>&1 || miss "openssl" openssl
command -v git >/dev/null || miss "git" git
command -v go >/dev/null || printf 'missing: the Go toolchain (go); this machine kind ships it\n' >&2
python3 -c 'import venv, ensurepip' 2>/dev/null || miss "python3 venv/ensurepip" python3-venv

if [ "$misses" -gt 0 ]; then
    printf '%s capability check(s) failed; scripts/bootstrap.sh installs scripts/system-packages.txt as root\n' "$misses" >&2
    exit 1
fi
exit 0
