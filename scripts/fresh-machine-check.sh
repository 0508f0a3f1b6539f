#!/usr/bin/env bash
# Runs the README's two commands as a new machine would: from a fresh clone of
# this repository's HEAD, with HOME, GOPATH, GOMODCACHE, GOCACHE and
# XDG_CACHE_HOME pointing at empty folders (so no Go module, Go build, pip or
# toolchain cache helps), and prints the wall time of every stage.
#
#   bash scripts/fresh-machine-check.sh [--remove-packages] [WORKDIR]
#
# --remove-packages first purges the Debian packages of scripts/system-packages.txt
# that a new machine of this kind does not have, so their install is exercised too
# (only on a machine you can spare: it removes openssh-server, nginx, ...).
# A cold run takes long on 2 cores (see README): each stage prints as it starts.
# CI (`.ci/run`) keeps running the normal, cached path.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)

remove_packages=
if [ "${1:-}" = "--remove-packages" ]; then remove_packages=1; shift; fi
work=${1:-$(mktemp -d /tmp/fresh-machine.XXXXXX)}
mkdir -p "$work"
log="$work/fresh-machine.log"

if [ -n "$remove_packages" ]; then
    base="$root/../shared/reference/fresh-machine-debian-packages.txt"
    mapfile -t extra < <(sed 's/#.*//' "$here/system-packages.txt" | tr -s ' \t' '\n' | sed '/^$/d' |
        grep -vxF -f <(grep -v '^#' "$base"))
    if [ ${#extra[@]} -gt 0 ]; then
        echo "==> purging ${extra[*]} (a new machine does not have them)"
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${extra[@]}" >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get autoremove -y -qq >/dev/null
    fi
fi

rm -rf "$work/repo"
git clone -q "$root" "$work/repo"
# CI runs the repo with ../shared beside it.
[ -e "$work/shared" ] || ln -s "$(cd "$root/../shared" && pwd)" "$work/shared"
for d in home gopath gomodcache gocache xdg-cache; do rm -rf "${work:?}/$d"; mkdir -p "$work/$d"; done
export HOME="$work/home" GOPATH="$work/gopath" GOMODCACHE="$work/gomodcache" GOCACHE="$work/gocache"
export XDG_CACHE_HOME="$work/xdg-cache"
# The machine's own Python lives under the real home (pyenv); it is the machine, not a cache.
export PYENV_ROOT="${PYENV_ROOT:-/root/.pyenv}"
unset TUIST_TOOLCHAIN_CACHE PIP_CACHE_DIR
# Its dev stack lives in a network namespace of its own, beside a developer's tuist-dev.
export TUIST_DEV_NETNS=tuist-fresh-check

timed() {
    local name=$1 start rc
    shift
    start=$(date +%s)
    echo "==> [$name] $*" | tee -a "$log"
    set +e
    (cd "$work/repo" && "$@") 2>&1 | tee -a "$log"
    rc=${PIPESTATUS[0]}
    set -e
    printf '<== [%s] exit %s after %ss\n' "$name" "$rc" "$(( $(date +%s) - start ))" | tee -a "$log"
    return "$rc"
}

overall=$(date +%s)
status=0
timed "dev-up" bash scripts/dev-up.sh || status=1
timed "dev-down" bash scripts/dev-down.sh || status=1
timed "test" bash scripts/test.sh || status=1

echo
echo "Stage times (from $log):"
grep -E '^<== ' "$log" | sed 's/^<== /  /'
printf 'all: %ss, %s\n' "$(( $(date +%s) - overall ))" "$([ "$status" = 0 ] && echo passed || echo FAILED)"
exit "$status"
