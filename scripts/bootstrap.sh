#!/usr/bin/env bash
# Sets up everything this project needs on a fresh machine, idempotently:
#   1. Debian packages the tests drive for real (OpenSSH, nginx, shellcheck, ...)
#   2. the project virtualenv (.venv) with the pinned Python dependencies
#   3. the pinned Pulumi CLI, our Python language host, the Python shims and
#      the Kubernetes provider plugin, built from Go modules when no fitting
#      `pulumi` is installed, and cached outside the work tree so a fresh clone
#      links them in seconds.
# Usage: bash scripts/bootstrap.sh [--quiet]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
# shellcheck source=scripts/toolchain/versions.env
source "$here/toolchain/versions.env"
root=$TUIST_ROOT
quiet=${1:-}

say() { [ "$quiet" = "--quiet" ] || printf '==> %s\n' "$*" >&2; }
die() { printf 'bootstrap: %s\n' "$*" >&2; exit 1; }

# --- 1. system packages ------------------------------------------------------
missing=()
while read -r pkg; do
    [ -z "$pkg" ] || [ "${pkg#\#}" != "$pkg" ] && continue
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done < "$here/system-packages.txt"
if [ ${#missing[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] || die "missing Debian packages (${missing[*]}); run as root or install them"
    say "installing Debian packages: ${missing[*]}"
    # Installing must never start services on the host: policy-rc.d refuses.
    policy=/usr/sbin/policy-rc.d
    created_policy=
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created_policy=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [ -z "$created_policy" ] || rm -f "$policy"
fi

# --- 2. Python virtualenv ----------------------------------------------------
stamp_of() { sha256sum "$root/pyproject.toml" | cut -d' ' -f1; }
if [ ! -x "$root/.venv/bin/python" ] || [ "$(cat "$root/.venv/.stamp" 2>/dev/null)" != "$(stamp_of)" ]; then
    say "installing Python dependencies into .venv"
    python3 -m venv "$root/.venv"
    "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip==25.3
    "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check -e "${root}[dev]"
    stamp_of > "$root/.venv/.stamp"
fi

# --- 3. Pulumi toolchain -----------------------------------------------------
cache_root=${TUIST_TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tuist-infra/toolchain}
# The cache key covers every input of the build, so a change to any of them
# builds afresh instead of reusing a stale binary.
key=$(cd "$here/toolchain" && cat versions.env go.mod go.sum langhost/main.go \
    kubernetes/go.mod kubernetes/go.sum kubernetes/main.go shims/* | sha256sum | cut -c1-16)
bin="$cache_root/pulumi-v$PULUMI_VERSION-$key/bin"

ambient=$(PATH=${PATH#"$root/.toolchain/bin:"} command -v pulumi || true)
if [ -n "$ambient" ] && "$ambient" version 2>/dev/null | grep -qx "v$PULUMI_VERSION"; then
    say "using the installed pulumi at $ambient (v$PULUMI_VERSION)"
    bin=$(dirname "$ambient")
elif [ ! -f "$bin/.complete" ]; then
    command -v go >/dev/null || die "no pulumi v$PULUMI_VERSION on PATH and no Go toolchain to build one"
    say "building Pulumi v$PULUMI_VERSION from its Go modules (cold build takes about 5 minutes here)"
    start=$(date +%s)
    work=$(mktemp -d "$cache_root.build.XXXXXX" 2>/dev/null || { mkdir -p "$cache_root" && mktemp -d "$cache_root.build.XXXXXX"; })
    trap 'rm -rf "$work"' EXIT
    mkdir -p "$work/bin"
    ver_pkg=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
    (cd "$here/toolchain" &&
        CGO_ENABLED=0 go build -trimpath -tags osusergo -ldflags "-s -w -X $ver_pkg=v$PULUMI_VERSION" \
            -o "$work/bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi &&
        CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X $ver_pkg=$PULUMI_VERSION" \
            -o "$work/bin/pulumi-language-python" ./langhost)
    sdk=$(cd "$here/toolchain" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi/sdk/v3)
    # Module-cache files are read-only and zips carry no exec bit: copy + chmod.
    install -m 0755 "$sdk/python/cmd/pulumi-language-python-exec" "$work/bin/"
    install -m 0755 "$sdk/python/dist/pulumi-resource-pulumi-python" "$work/bin/"
    install -m 0755 "$here/toolchain/shims/pulumi-analyzer-policy-python" "$work/bin/"

    say "building the Kubernetes provider plugin v$KUBERNETES_PROVIDER_VERSION"
    k8s_src=$(cd "$here/toolchain/kubernetes" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)
    cp "$k8s_src/cmd/pulumi-resource-kubernetes/schema.json" "$k8s_src/cmd/pulumi-resource-kubernetes/terraform-mapping.json" "$work/"
    mkdir -p "$work/k8s" && cp "$here/toolchain/kubernetes/"{go.mod,go.sum,main.go} "$work/k8s/" && mv "$work/"*.json "$work/k8s/"
    (cd "$work/k8s" && chmod 644 ./*.json &&
        CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_PROVIDER_VERSION" \
            -o "$work/bin/pulumi-resource-kubernetes" .)
    touch "$work/bin/.complete"
    mkdir -p "$(dirname "$bin")"
    rm -rf "$(dirname "$bin")" && mv "$work" "$(dirname "$bin")"
    trap - EXIT
    say "toolchain built in $(( $(date +%s) - start ))s into $(dirname "$bin")"
fi
mkdir -p "$root/.toolchain"
ln -sfn "$bin" "$root/.toolchain/bin"
"$root/.toolchain/bin/pulumi" version >/dev/null || die "the pulumi binary at $bin does not run"
say "pulumi $("$root/.toolchain/bin/pulumi" version) ready in .toolchain/bin"
