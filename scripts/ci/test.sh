#!/usr/bin/env bash
# The test job on a GitHub runner: exactly what CI runs (.ci/run), as root. The tests need a network
# namespace of their own (scripts/netns.sh) and the boxes' sandbox, which need root; the runner's
# user has passwordless sudo. -E keeps HOME, so the set-up's caches (scripts/ci/setup.sh, run as
# the runner's user) are the ones found; PATH is passed on, which sudo would otherwise reset.
# Usage: bash scripts/ci/test.sh
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ "$(id -u)" = 0 ]; then
    exec bash "$root/.ci/run"
fi
exec sudo -E env "PATH=$PATH" bash "$root/.ci/run"
