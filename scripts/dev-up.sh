#!/usr/bin/env bash
# The main job on the embedded default: set up, start vendorsim (the local OVH,
# Dedibox and Robot simulator with SSH boxes), then `pulumi up -s dev` on a
# local file backend, and print a summary of what was made. vendorsim keeps
# running so `scripts/dev-down.sh` can release the boxes again.
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
bash "$here/vendorsim.sh" start
mkdir -p .pulumi-state build/dev
pulumi stack select dev --create --non-interactive >/dev/null
log=build/dev/preview-diff.log
echo "==> pulumi preview -s dev --diff (the full diff goes to $log)"
pulumi preview -s dev --diff --non-interactive > "$log" 2>&1 || {
    tail -n 40 "$log" >&2
    echo "preview failed; the whole output is in $log" >&2
    exit 1
}
grep -E '^Resources:|^ +[+~-]?[0-9]+ to ' "$log" || true
echo "==> pulumi up -s dev"
pulumi up -s dev --yes --non-interactive --skip-preview
pulumi stack output -s dev --json > build/dev/outputs.json
echo "==> what the dev stack made (outputs: build/dev/outputs.json, full diff: $log)"
python "$here/dev_summary.py" < build/dev/outputs.json
