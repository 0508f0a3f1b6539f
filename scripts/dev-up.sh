#!/usr/bin/env bash
# The main job on the embedded default: set up, then in the network namespace
# tuist-dev (scripts/netns.sh) start the local control plane (scripts/cluster.sh,
# with two cloud workers for the controllers) and vendorsim (the local OVH,
# Dedibox and Robot simulator with SSH boxes), then `pulumi up -s dev` on a
# local file backend, and print a summary of what was made. Both keep running
# so `scripts/dev-down.sh` can release the boxes again; `scripts/dev.sh CMD`
# runs CMD beside them (e.g. `scripts/dev.sh kubectl get nodes`).
#
# Output: the set-up stages with their times, Pulumi's normal progress, then
# tables of fleets (boxes, nodes), regions (failover IP and where it routes) and
# runner pools (capacity). The full `--diff` of the deploy goes to
# build/dev/preview-diff.log, the stack outputs as JSON to build/dev/outputs.json.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/bootstrap.sh"
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$TUIST_ROOT"
export PULUMI_CONFIG_PASSPHRASE="$TUIST_DEV_PASSPHRASE"
in_netns() { bash "$here/netns.sh" run "$TUIST_DEV_NETNS" -- "$@"; }

bash "$here/netns.sh" create "$TUIST_DEV_NETNS"
mkdir -p .pulumi-state build/dev
# A persistent directory: the cluster keeps its CA, its address (Pulumi.dev.yaml's api_server) and
# its objects across restarts, so boxes joined earlier still trust it.
cluster_dir=build/dev/cluster
echo "==> control plane (scripts/cluster.sh, in network namespace $TUIST_DEV_NETNS)"
in_netns bash "$here/cluster.sh" start --dir "$cluster_dir" --apiserver-port 6443 --cloud-workers 2 --platform
bash "$here/vendorsim.sh" start
pulumi stack select dev --create --non-interactive >/dev/null
# The stack's kubeconfig secret is this cluster's admin kubeconfig: set it when the cluster is new
# (a fresh build/dev/cluster has a new CA). Compared and set through pipes, never printed.
current=$(pulumi config get kubeconfig -s dev 2>/dev/null || true)
if [ "$current" != "$(cat "$cluster_dir/admin.kubeconfig")" ]; then
    pulumi config set --secret kubeconfig -s dev <"$cluster_dir/admin.kubeconfig" >/dev/null
    echo "==> the dev stack's kubeconfig secret now names this cluster (Pulumi.dev.yaml changed)"
fi
log=build/dev/preview-diff.log
echo "==> pulumi preview -s dev --diff (the full diff goes to $log)"
in_netns bash "$here/private-tmp.sh" pulumi preview -s dev --diff --non-interactive > "$log" 2>&1 || {
    tail -n 40 "$log" >&2
    echo "preview failed; the whole output is in $log" >&2
    exit 1
}
grep -E '^Resources:|^ +[+~-]? ?[0-9]+ (to |unchanged)' "$log" || true
echo "==> pulumi up -s dev"
in_netns bash "$here/private-tmp.sh" pulumi up -s dev --yes --non-interactive --skip-preview
pulumi stack output -s dev --json > build/dev/outputs.json
echo "==> what the dev stack made (outputs: build/dev/outputs.json, full diff: $log)"
python "$here/dev_summary.py" < build/dev/outputs.json
echo "==> scripts/dev.sh CMD runs CMD beside it (scripts/dev.sh kubectl get nodes); scripts/dev-down.sh tears it down"
