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
# How every pulumi run of the project drives the engine (dev, operators, CI, benchmarks): the
# KEY=value lines of scripts/engine.env, exported unless the environment already sets them.
while IFS='=' read -r _key _value; do
    case $_key in '' | '#'*) continue ;; esac
    [ -n "${!_key+x}" ] || export "$_key=$_value"
done < "$TUIST_ROOT/scripts/engine.env"
unset _key _value
# `pulumi` in an interactive shell that sourced this file (an operator's) runs with a TMPDIR of its
# own, removed after the run: the Kubernetes plugin leaves the stack's kubeconfig, client key included,
# in $TMPDIR at every run (scripts/private-tmp.sh says where). `command pulumi` skips it. Scripts call
# private-tmp.sh themselves where a run configures the plugin; in them `pulumi` stays the program
# (set-up looks it up on PATH, and a function of that name would pass for an installed CLI).
case $- in
    *i*) pulumi() { bash "$TUIST_ROOT/scripts/private-tmp.sh" pulumi "$@"; } ;;
esac
# The dev stack only. Real stacks take their passphrase or KMS from the operator.
export TUIST_DEV_PASSPHRASE="tuist-dev-only-passphrase"
# The dev stack's network namespace (scripts/netns.sh): vendorsim, its boxes, the control plane and
# pulumi run there (scripts/dev-up.sh, scripts/dev.sh).
export TUIST_DEV_NETNS="${TUIST_DEV_NETNS:-tuist-dev}"
# Python keeps the bytecode it compiles (in __pycache__/, gitignored) even where the environment says
# not to: every pulumi run starts a program and a provider process, and without it each compiled the
# project's modules again (0.2 s of a program's start) and each pytest worker re-rewrote every test file.
unset PYTHONDONTWRITEBYTECODE
