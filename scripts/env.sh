# shellcheck shell=bash
# Sourced by the scripts: puts the project's toolchain first on PATH and keeps
# Pulumi's state and home inside the (gitignored) work tree.
TUIST_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export TUIST_ROOT
# Sourcing twice must not stack the entries (set-up tells "ours" from "installed" by PATH).
case ":$PATH:" in
    *":$TUIST_ROOT/.toolchain/bin:$TUIST_ROOT/.venv/bin:"*) ;;
    *) export PATH="$TUIST_ROOT/.toolchain/bin:$TUIST_ROOT/.venv/bin:$PATH" ;;
esac
export PULUMI_HOME="$TUIST_ROOT/.pulumi-state/home"
export PULUMI_BACKEND_URL="${PULUMI_BACKEND_URL:-file://$TUIST_ROOT/.pulumi-state}"
export PULUMI_SKIP_UPDATE_CHECK=true
export PULUMI_DIY_BACKEND_NO_LEGACY_WARNING=true
# The dev stack only. Real stacks take their passphrase or KMS from the operator.
export TUIST_DEV_PASSPHRASE="tuist-dev-only-passphrase"
# The dev stack's network namespace (scripts/netns.sh): vendorsim, its boxes, the control plane and
# pulumi run there (scripts/dev-up.sh, scripts/dev.sh).
export TUIST_DEV_NETNS="${TUIST_DEV_NETNS:-tuist-dev}"
