#!/usr/bin/env bash
# Deploys one real stack from CI: log in to the state backend, then `pulumi up` with the policy pack
# (a mandatory violation stops the update before it changes anything). The GitHub environment of
# the stack provides its secrets: the S3 credentials and the stack's passphrase. With APPROVED_PREVIEW
# (a folder of `preview.py run`'s results: production's, which its reviewers approved), the stack is
# previewed again first and nothing is deployed unless it plans the same steps (preview.py verify).
# Usage: [APPROVED_PREVIEW=DIR] bash scripts/ci/deploy.sh staging|canary|production
set -euo pipefail
stack=${1:?usage: deploy.sh STACK}
case $stack in
    staging | canary | production) ;;
    *) echo "deploy: '$stack' is not a real stack (staging, canary, production)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/env.sh
source "$here/../env.sh"
unset PULUMI_BACKEND_URL  # env.sh points at the local file backend; CI logs in to the real one
# shellcheck source=scripts/ci/backend.sh
source "$here/backend.sh"
: "${PULUMI_CONFIG_PASSPHRASE:?the $stack environment must provide PULUMI_CONFIG_PASSPHRASE}"
cd "$TUIST_ROOT"
backend_login
if [ -n "${APPROVED_PREVIEW:-}" ]; then
    bash "$TUIST_ROOT/scripts/private-tmp.sh" python3 "$here/preview.py" verify "$stack" --approved "$APPROVED_PREVIEW"
fi
# --parallel: the CLI's default (4 x CPU cores) would adopt a fleet a runner's cores at a time; the
# machine provider serves 64 calls at once (docs/machines.md).
# private-tmp.sh: the Kubernetes plugin's copy of the kubeconfig goes with the run (a runner may be reused).
exec bash "$TUIST_ROOT/scripts/private-tmp.sh" pulumi up --yes --non-interactive --color never --diff --policy-pack policy --parallel 64 --stack "$stack"
