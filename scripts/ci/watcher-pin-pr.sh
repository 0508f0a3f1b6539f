#!/usr/bin/env bash
# After the watcher image is pushed: pin its digest in every real stack file (pin_image.py) and open
# a pull request with the change, so the new image reaches a stack only through a reviewed preview
# and the normal deploy. Does nothing when the stacks already pin this digest.
# Usage: GH_TOKEN=... bash scripts/ci/watcher-pin-pr.sh ghcr.io/tuist/tuist-infra-watcher@sha256:<digest>
set -euo pipefail
image=${1:?usage: watcher-pin-pr.sh IMAGE@DIGEST}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$here/../.."
python3 scripts/ci/pin_image.py "$image"
if git diff --quiet -- Pulumi.staging.yaml Pulumi.canary.yaml Pulumi.production.yaml; then
    echo "every stack already pins $image"
    exit 0
fi
digest=${image#*@sha256:}
branch="pin-watcher-${digest:0:12}"
git switch -c "$branch"
git add Pulumi.staging.yaml Pulumi.canary.yaml Pulumi.production.yaml
git -c user.name="github-actions[bot]" -c user.email="41898282+github-actions[bot]@users.noreply.github.com" \
    commit -m "Pin the failover watcher image ${image#*@}" -m "Built and pushed by the watcher-image workflow."
git push origin "$branch"
gh pr create --base main --head "$branch" --title "Pin the failover watcher image ${digest:0:12}" \
    --body "The watcher-image workflow pushed \`$image\`; this pins it in staging, canary and production. The preview comment shows the watcher Deployments changing image."
