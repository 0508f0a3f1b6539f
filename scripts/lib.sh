# shellcheck shell=bash
# Helpers shared by the set-up scripts (sourced after `set -euo pipefail`): stages that say where they are, and Go
# module directories that are downloaded when missing (never read off a cache
# that may be empty on a new machine).

shopt -s inherit_errexit

# stage NAME CMD...: prints the stage's name when it starts and its elapsed time
# when it ends, so a person watching a long cold build sees it progress.
stage() {
    local name=$1 start rc
    shift
    start=$(date +%s)
    printf '==> %s\n' "$name" >&2
    # A subshell that is not part of an && / || list keeps `set -e` in force inside it.
    set +e
    (set -e; "$@")
    rc=$?
    set -e
    if [ "$rc" -eq 0 ]; then
        printf '<== %s: done in %ss\n' "$name" "$(( $(date +%s) - start ))" >&2
    else
        printf '<== %s: FAILED after %ss (exit %s)\n' "$name" "$(( $(date +%s) - start ))" "$rc" >&2
    fi
    return "$rc"
}

die() { printf 'set-up: %s\n' "$*" >&2; exit 1; }

# module_dir GOMODDIR MODULE: the directory of MODULE, at the version GOMODDIR's
# go.mod requires, downloading it first if this machine does not have it.
module_dir() {
    local moddir=$1 module=$2 json dir
    json=$(cd "$moddir" && go mod download -json "$module" 2>&1) ||
        die "cannot download Go module $module (needed by $moddir): $(printf '%s' "$json" | tr '\n' ' ' | cut -c1-400)"
    dir=$(printf '%s' "$json" | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir",""))' 2>/dev/null || true)
    if [ -z "$dir" ] || [ ! -d "$dir" ]; then
        die "Go module $module has no directory after download (go mod download said: $(printf '%s' "$json" | tr '\n' ' ' | cut -c1-400))"
    fi
    printf '%s\n' "$dir"
}

# inputs_key FILE...: a short hash of every input of a build, so a change to any
# of them builds afresh instead of reusing a stale binary.
inputs_key() { cat "$@" | sha256sum | cut -c1-16; }

toolchain_cache_root() { printf '%s\n' "${TUIST_TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tuist-infra/toolchain}"; }

# cached_build NAME KEY BUILDFN: runs BUILDFN WORKDIR/bin once per KEY into the
# toolchain cache (outside the work tree, so fresh clones reuse it); prints the
# cached bin directory.
cached_build() {
    local name=$1 key=$2 fn=$3 root dest work rc lock
    # The recipe is an input too: the build function's own text (its flags, version stamps, the
    # files it copies) and the Go that compiles it. Editing either builds afresh.
    key=$({ printf '%s\n' "$key"; declare -f "$fn"; go version 2>/dev/null || true; } | sha256sum | cut -c1-16)
    root=$(toolchain_cache_root)
    dest="$root/$name-$key"
    mkdir -p "$root"
    # Two set-ups at once (a CI run beside a dev shell) wait for one build instead of racing.
    exec {lock}>"$root/.lock-$name-$key"
    if [ ! -f "$dest/bin/.complete" ] && ! flock -n "$lock"; then
        echo "waiting for another set-up that is building $name" >&2
        flock "$lock"
    fi
    if [ ! -f "$dest/bin/.complete" ]; then
        work=$(mktemp -d "$root/.build-$name.XXXXXX")
        mkdir -p "$work/bin"
        set +e
        (set -e; "$fn" "$work") >&2
        rc=$?
        set -e
        if [ "$rc" -ne 0 ]; then
            rm -rf "$work"
            die "building $name failed (see above)"
        fi
        touch "$work/bin/.complete"
        rm -rf "$dest"
        mv "$work" "$dest"
    fi
    exec {lock}>&-
    printf '%s\n' "$dest/bin"
}

# link_bins DIR: links every executable of DIR into .toolchain/bin. An empty DIR (the output of a
# failed build: a command substitution's status is lost when it is an argument), a missing one, or
# one with nothing to link is an error, never a stage that reports done with stale links.
link_bins() {
    local dir=${1:-} f linked=0
    [ -n "$dir" ] || die "link_bins: no directory given (did the build before it fail?)"
    [ -d "$dir" ] || die "link_bins: $dir is not a directory"
    mkdir -p "$TUIST_ROOT/.toolchain/bin"
    if [ "$(cd "$dir" && pwd -P)" = "$(cd "$TUIST_ROOT/.toolchain/bin" && pwd -P)" ]; then
        die "link_bins: $dir is .toolchain/bin itself"
    fi
    for f in "$dir"/*; do
        if [ ! -f "$f" ] || [ ! -x "$f" ]; then continue; fi
        ln -sfn "$f" "$TUIST_ROOT/.toolchain/bin/$(basename "$f")"
        linked=$((linked + 1))
    done
    [ "$linked" -gt 0 ] || die "link_bins: $dir has no executable to link"
}
