#!/usr/bin/env bash
# Runs a command with TMPDIR set to a new folder of its own (mode 0700), and removes that folder
# when the command has ended. Exits with the command's status.
#
#   bash scripts/private-tmp.sh pulumi up -s staging
#
# Why: the Kubernetes plugin writes the stack's kubeconfig, client key included, to a new file in
# $TMPDIR each time the engine configures it (every preview, up, refresh and destroy) and never
# removes it (pulumi-kubernetes v4, provider/pkg/provider/util.go: writeKubeconfigToFile, the file
# it hands to Helm). The project runs every `pulumi` through here (scripts/env.sh's `pulumi`
# function, the CI and dev scripts, scripts/test.sh), so no run leaves a credential behind.
#
# Signals: SIGTERM and SIGHUP sent to this script are passed on to the command, and the script
# waits for it to end before removing the folder. SIGINT from a terminal reaches the command
# directly (same process group): this script only waits, so the command sees one Ctrl-C, not two.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: private-tmp.sh COMMAND [ARG...]" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tuist-run.XXXXXXXX")
child=
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2317  # called from the traps below
forward() { [ -z "$child" ] || kill -"$1" "$child" 2>/dev/null || true; }
trap ':' INT
trap 'forward TERM' TERM
trap 'forward HUP' HUP
# A background job of a script gets /dev/null as stdin and ignores SIGINT unless told otherwise:
# the command keeps this script's stdin (prompts, an interactive shell) and the default SIGINT.
(
    trap - INT QUIT
    export TMPDIR="$tmp"
    exec "$@"
) <&0 &
child=$!
set +e
while :; do
    # wait returns early (status > 128) when a trapped signal arrives; the command is still running.
    wait "$child"
    rc=$?
    kill -0 "$child" 2>/dev/null || break
done
exit "$rc"
