#!/usr/bin/env bash
# The whole test suite: set-up, then ruff, mypy and pytest (unit, provider,
# integration with real OpenSSH, nginx and a Kubernetes control plane, and the
# end-to-end run of the dev stack through the real Pulumi engine). Extra
# arguments go to pytest, which runs in a network namespace of its own
# (scripts/netns.sh): the simulated boxes' addresses exist only there, and
# several runs on one machine never meet each other's ports.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/bootstrap.sh"
# shellcheck source=scripts/env.sh
source "$here/env.sh"
cd "$TUIST_ROOT"
echo "==> ruff"
ruff check .
echo "==> mypy"
mypy .
echo "==> pytest (in a network namespace of its own)"
exec bash "$here/netns.sh" exec -- python -m pytest "$@"
