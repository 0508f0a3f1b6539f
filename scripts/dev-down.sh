#!/usr/bin/env bash
# Releases everything the dev stack adopted (`pulumi destroy -s dev`), then
# stops vendorsim. Its audit log stays in build/vendorsim for inspection.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$TUIST_ROOT"
export PULUMI_CONFIG_PASSPHRASE="$TUIST_DEV_PASSPHRASE"
bash "$here/vendorsim.sh" start
pulumi destroy -s dev --yes --non-interactive
bash "$here/vendorsim.sh" stop
