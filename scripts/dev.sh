#!/usr/bin/env bash
# Runs a command where the dev stack lives: in its network namespace (scripts/netns.sh), from the
# work tree, with the project's toolchain on PATH, the dev passphrase, and kubectl pointed at the local
# control plane. With no command, a shell there.
#
#   scripts/dev.sh pulumi stack output -s dev --json
#   scripts/dev.sh kubectl get nodes -o wide
#   scripts/dev.sh curl -s http://127.0.0.1:8710/_admin/state
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
export PULUMI_CONFIG_PASSPHRASE="$TUIST_DEV_PASSPHRASE"
export KUBECONFIG="$TUIST_ROOT/build/dev/cluster/admin.kubeconfig"
cd "$TUIST_ROOT"
[ $# -gt 0 ] || set -- bash
# pulumi gets a TMPDIR of its own, removed after (scripts/private-tmp.sh): the Kubernetes plugin leaves
# the dev kubeconfig there at every run.
[ "$1" != pulumi ] || set -- bash "$here/private-tmp.sh" "$@"
exec bash "$here/netns.sh" run "$TUIST_DEV_NETNS" -- "$@"
