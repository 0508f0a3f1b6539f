#!/usr/bin/env bash
# The whole test suite: set-up, then ruff, mypy and pytest (unit, provider,
# integration with real OpenSSH and nginx, and the end-to-end run of the dev
# stack through the real Pulumi engine). Extra arguments go to pytest.
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
echo "==> pytest"
exec python -m pytest "$@"
