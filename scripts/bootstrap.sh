#!/usr/bin/env bash
# Sets up everything this project needs on a fresh machine, idempotently, in
# stages that each print their name and elapsed time:
#   system packages     Debian packages the tests drive for real, then a check of
#                       the capabilities themselves (scripts/check-system.sh)
#   python virtualenv   .venv from the hashed lock file requirements.lock
#   pulumi cli          the pinned CLI and our Python language host, built from Go
#                       modules when no pulumi of the pinned version is installed
#   kubernetes plugin   pulumi-resource-kubernetes, built from its Go module
#   actionlint          the GitHub Actions linter the tests run over .github/workflows,
#                       built from its Go module (scripts/toolchain/actionlint/go.mod pins it)
#   kubernetes control plane
#                       kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and the
#                       kubelet stand-in, built from k8s.io/kubernetes (scripts/toolchain/kube);
#                       etcd is Debian's etcd-server (system packages). scripts/cluster.sh runs them.
# Builds are cached outside the work tree (~/.cache/tuist-infra/toolchain, one
# directory per build keyed by a hash of its inputs), so a fresh clone on the
# same machine links them in about a second; .toolchain/bin links them all.
# Usage: bash scripts/bootstrap.sh
# Sourced (tests/scripts/test_bootstrap.py), it only defines its functions and runs no stage.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
# shellcheck source=scripts/lib.sh
source "$here/lib.sh"
# shellcheck source=scripts/toolchain/versions.env
source "$here/toolchain/versions.env"
root=$TUIST_ROOT
tc=$here/toolchain
overall=$(date +%s)

# --- system packages ----------------------------------------------------------------------------
# apt_install PKG...: apt-get update, then install PKG..., with a policy-rc.d that refuses every
# service start (installing must never start or restart services on the host). A policy-rc.d this
# call creates is removed however the install ends (done, failed, interrupted): left behind, it
# would stop every later install on the host from starting its service. One that was there before
# is left as it was. TUIST_POLICY_RC_D moves it, for the tests only.
apt_install() {
    local policy=${TUIST_POLICY_RC_D:-/usr/sbin/policy-rc.d}
    (
        set -e
        if [ ! -e "$policy" ]; then
            # The EXIT trap runs on every exit of this subshell; a signal is turned into an exit.
            trap 'rm -f "$policy"' EXIT
            trap 'exit 129' HUP
            trap 'exit 130' INT
            trap 'exit 143' TERM
            printf '#!/bin/sh\nexit 101\n' >"$policy"
            chmod +x "$policy"
        fi
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
    )
}

system_packages() {
    local missing=() pkg
    while read -r pkg; do
        pkg=${pkg%%#*}
        pkg=${pkg//[[:space:]]/}
        [ -n "$pkg" ] || continue
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done < "$here/system-packages.txt"
    if [ ${#missing[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || die "missing Debian packages (${missing[*]}): run as root or install them"
        echo "installing: ${missing[*]}" >&2
        apt_install "${missing[@]}"
    fi
    bash "$here/check-system.sh"
}

# --- python virtualenv --------------------------------------------------------------------------
python_venv() {
    local stamp
    stamp=$(inputs_key "$root/pyproject.toml" "$root/requirements.lock")
    if [ -x "$root/.venv/bin/python" ] && [ "$(cat "$root/.venv/.stamp" 2>/dev/null)" = "$stamp" ]; then
        return 0
    fi
    rm -rf "$root/.venv"
    python3 -m venv "$root/.venv"
    "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip==25.3
    # Every dependency from the lock, checked against its hash; then the project itself, no deps.
    "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check --require-hashes \
        -r "$root/requirements.lock"
    "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e "$root"
    printf '%s\n' "$stamp" > "$root/.venv/.stamp"
}

# --- pulumi cli + language host -----------------------------------------------------------------
# Each cached build's key and bin directory go to a variable first, declared on a line of its own
# (`local x=$(...)` has local's status, not the build's): a command substitution passed straight as
# an argument loses its status, and a failed build went on as an empty directory, the stage done.
build_pulumi() {
    local out=$1/bin ver_pkg=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
    (cd "$tc" &&
        CGO_ENABLED=0 go build -trimpath -tags osusergo -ldflags "-s -w -X $ver_pkg=v$PULUMI_VERSION" \
            -o "$out/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
}

# The language host and the Python shims: a build of their own, so changing our host (seconds to
# build) never invalidates the CLI (minutes).
build_langhost() {
    local out=$1/bin sdk ver_pkg=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
    (cd "$tc" &&
        CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $ver_pkg=$PULUMI_VERSION" \
            -o "$out/pulumi-language-python" ./langhost) || return 1
    sdk=$(module_dir "$tc" github.com/pulumi/pulumi/sdk/v3)
    # Module-cache files are read-only and zips carry no exec bit: copy + chmod.
    install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$out/"
    install -m 0755 "$sdk/python/dist/pulumi-resource-pulumi-python" "$out/"
    install -m 0755 "$tc/shims/pulumi-analyzer-policy-python" "$out/"
}

pulumi_cli() {
    local ambient bin key langhost
    # An installed pulumi, never one of ours (.toolchain/bin may sit on PATH more than once).
    ambient=$(PATH=$(tr ':' '\n' <<<"$PATH" | grep -vxF "$root/.toolchain/bin" | paste -sd:) command -v pulumi || true)
    if [ -n "$ambient" ] && "$ambient" version 2>/dev/null | grep -qx "v$PULUMI_VERSION"; then
        echo "using the installed pulumi at $ambient (v$PULUMI_VERSION)" >&2
        bin=$(dirname "$ambient")
    else
        command -v go >/dev/null || die "no pulumi v$PULUMI_VERSION on PATH and no Go toolchain to build one"
        key=$(inputs_key <(echo "PULUMI_VERSION=$PULUMI_VERSION") "$tc/go.mod" "$tc/go.sum")
        bin=$(cached_build "pulumi-v$PULUMI_VERSION" "$key" build_pulumi)
    fi
    link_bins "$bin"
    command -v go >/dev/null || die "no Go toolchain to build the Python language host"
    key=$(inputs_key <(echo "PULUMI_VERSION=$PULUMI_VERSION") "$tc/go.mod" "$tc/go.sum" "$tc"/langhost/*.go "$tc"/shims/*)
    langhost=$(cached_build "pulumi-langhost-v$PULUMI_VERSION" "$key" build_langhost)
    link_bins "$langhost"
    "$root/.toolchain/bin/pulumi" version >/dev/null || die "the pulumi binary in $bin does not run"
}

# --- kubernetes provider plugin -----------------------------------------------------------------
build_kubernetes_plugin() {
    local out=$1 src
    src=$(module_dir "$tc/kubernetes" github.com/pulumi/pulumi-kubernetes/provider/v4)
    mkdir -p "$out/src"
    cp "$tc/kubernetes/"{go.mod,go.sum,main.go} "$out/src/"
    # go:embed only reads files inside the package directory: the schema the module ships.
    cp "$src/cmd/pulumi-resource-kubernetes/schema.json" "$src/cmd/pulumi-resource-kubernetes/terraform-mapping.json" "$out/src/"
    chmod 644 "$out/src/"*.json
    (cd "$out/src" &&
        CGO_ENABLED=0 go build -trimpath \
            -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_PROVIDER_VERSION" \
            -o "$out/bin/pulumi-resource-kubernetes" .) || return 1
    rm -rf "$out/src"
}

kubernetes_plugin() {
    local bin key
    key=$(inputs_key <(echo "KUBERNETES_PROVIDER_VERSION=$KUBERNETES_PROVIDER_VERSION") "$tc/kubernetes/go.mod" "$tc/kubernetes/go.sum" "$tc/kubernetes/main.go")
    bin=$(cached_build "pulumi-kubernetes-v$KUBERNETES_PROVIDER_VERSION" "$key" build_kubernetes_plugin)
    link_bins "$bin"
}

# --- actionlint ---------------------------------------------------------------------------------
actionlint_version() { awk '$1 == "require" && $2 == "github.com/rhysd/actionlint" { print $3 }' "$tc/actionlint/go.mod"; }

build_actionlint() {
    local out=$1/bin
    (cd "$tc/actionlint" &&
        CGO_ENABLED=0 go build -trimpath \
            -ldflags "-s -w -X github.com/rhysd/actionlint.version=$(actionlint_version)" \
            -o "$out/actionlint" github.com/rhysd/actionlint/cmd/actionlint) || return 1
}

actionlint_tool() {
    local bin key version
    version=$(actionlint_version)
    command -v go >/dev/null || die "no Go toolchain to build actionlint $version"
    key=$(inputs_key "$tc/actionlint/go.mod" "$tc/actionlint/go.sum")
    bin=$(cached_build "actionlint-$version" "$key" build_actionlint)
    link_bins "$bin"
    "$root/.toolchain/bin/actionlint" -version >/dev/null || die "the actionlint binary in $bin does not run"
}

# --- kubernetes control plane -------------------------------------------------------------------
build_kube() {
    local out=$1/bin v=k8s.io/component-base/version major minor
    IFS=. read -r major minor _ <<<"$KUBERNETES_VERSION"
    grep -qE "^[[:space:]]*(require[[:space:]]+)?k8s\.io/kubernetes v${KUBERNETES_VERSION//./\\.}\$" "$tc/kube/go.mod" ||
        die "scripts/toolchain/kube/go.mod does not require k8s.io/kubernetes v$KUBERNETES_VERSION (versions.env)"
    # One go build for all five: they share one dependency graph and compile it once. The version
    # stamps are the ones the release build sets (kubectl version, the Node's kubeletVersion).
    (cd "$tc/kube" &&
        CGO_ENABLED=0 go build -trimpath \
            -ldflags "-s -w -X $v.gitVersion=v$KUBERNETES_VERSION -X $v.gitMajor=$major -X $v.gitMinor=$minor -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z" \
            -o "$out/" \
            k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
            k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl ./kubelet-standin)
}

kube_control_plane() {
    local bin key
    command -v go >/dev/null || die "no Go toolchain to build the Kubernetes control plane"
    key=$(inputs_key <(echo "KUBERNETES_VERSION=$KUBERNETES_VERSION") "$tc/kube/go.mod" "$tc/kube/go.sum" "$tc"/kube/*.go "$tc"/kube/kubelet-standin/*.go)
    bin=$(cached_build "kubernetes-v$KUBERNETES_VERSION" "$key" build_kube)
    link_bins "$bin"
    "$root/.toolchain/bin/kube-apiserver" --version >/dev/null || die "the kube-apiserver binary in $bin does not run"
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then return 0; fi

stage "system packages" system_packages
stage "python virtualenv" python_venv
stage "pulumi cli v$PULUMI_VERSION" pulumi_cli
stage "kubernetes plugin v$KUBERNETES_PROVIDER_VERSION" kubernetes_plugin
stage "actionlint $(actionlint_version)" actionlint_tool
stage "kubernetes control plane v$KUBERNETES_VERSION" kube_control_plane
printf '==> set-up complete in %ss: %s\n' "$(( $(date +%s) - overall ))" "$("$root/.toolchain/bin/pulumi" version)" >&2
