#!/usr/bin/env bash
# The main job on the embedded default: set up, start vendorsim (the local OVH,
# Dedibox and Robot simulator with SSH boxes), then `pulumi up -s dev` on a
# local file backend, and print the stack outputs. vendorsim keeps running so
# `scripts/dev-down.sh` can release the boxes again.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/bootstrap.sh"
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$TUIST_ROOT"
export PULUMI_CONFIG_PASSPHRASE="$TUIST_DEV_PASSPHRASE"
bash "$here/vendorsim.sh" start
mkdir -p .pulumi-state
pulumi stack select dev --create --non-interactive >/dev/null
pulumi up -s dev --yes --non-interactive --diff
echo "==> stack outputs (pulumi stack output -s dev --json)"
pulumi stack output -s dev --json
