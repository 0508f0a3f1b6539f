#!/usr/bin/env bash
# CI set-up on a GitHub-hosted runner: the Debian packages of scripts/system-packages.txt (with sudo:
# the runner user is not root), then exactly the set-up a developer runs (scripts/bootstrap.sh).
# Usage: bash scripts/ci/setup.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$(id -u)" != 0 ]; then
    mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$here/../system-packages.txt")
    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi
exec bash "$here/../bootstrap.sh"
