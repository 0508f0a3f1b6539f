#!/usr/bin/env bash
# Destroys the dev stack (`pulumi destroy -s dev`: every Node drained and deleted
# with its node-local claims on the control plane, every box released back to
# its pool through vendorsim), then stops vendorsim and the control plane and
# removes the network namespace. vendorsim's audit log and the cluster's logs stay
# in build/vendorsim and build/dev/cluster/logs for inspection.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$TUIST_ROOT"
export PULUMI_CONFIG_PASSPHRASE="$TUIST_DEV_PASSPHRASE"
in_netns() { bash "$here/netns.sh" run "$TUIST_DEV_NETNS" -- "$@"; }
cluster_dir=build/dev/cluster

# Everything the destroy talks to runs again first (after a reboot, say): the same namespace name,
# the cluster from its persistent directory, vendorsim from its state.
bash "$here/netns.sh" create "$TUIST_DEV_NETNS"
if [ -f "$cluster_dir/admin.kubeconfig" ]; then
    in_netns bash "$here/cluster.sh" start --dir "$cluster_dir" --apiserver-port 6443 --cloud-workers 2 --platform
fi
bash "$here/vendorsim.sh" start
in_netns bash "$here/private-tmp.sh" pulumi destroy -s dev --yes --non-interactive
bash "$here/vendorsim.sh" stop
if [ -f "$cluster_dir/admin.kubeconfig" ]; then in_netns bash "$here/cluster.sh" stop --dir "$cluster_dir"; fi
left=$(bash "$here/netns.sh" pids "$TUIST_DEV_NETNS" | tr '\n' ' ')
if [ -n "$left" ]; then
    echo "dev-down: processes still run in network namespace $TUIST_DEV_NETNS (pids $left); it stays" >&2
    exit 1
fi
bash "$here/netns.sh" delete "$TUIST_DEV_NETNS"
echo "==> dev stack destroyed; vendorsim, the control plane and network namespace $TUIST_DEV_NETNS stopped"
