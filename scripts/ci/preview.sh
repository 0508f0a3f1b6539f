#!/usr/bin/env bash
# Previews one real stack from CI: log in to the state backend, then scripts/ci/preview.py run
# (`pulumi preview --diff` with the policy pack and the stack's deployed machines as its baseline).
# Writes OUT/STACK.txt and OUT/STACK.json for the comment job; exits with the preview's status.
# Usage: bash scripts/ci/preview.sh staging|canary|production OUT
set -euo pipefail
stack=${1:?usage: preview.sh STACK OUT}
out=${2:?usage: preview.sh STACK OUT}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/../env.sh"
unset PULUMI_BACKEND_URL  # env.sh points at the local file backend; CI logs in to the real one
# shellcheck source=scripts/ci/backend.sh
source "$here/backend.sh"
: "${PULUMI_CONFIG_PASSPHRASE:?the preview-$stack environment must provide PULUMI_CONFIG_PASSPHRASE}"
backend_login
# private-tmp.sh: the Kubernetes plugin's copy of the kubeconfig goes with the run (a runner may be reused).
exec bash "$TUIST_ROOT/scripts/private-tmp.sh" python3 "$here/preview.py" run "$stack" --out "$out"
