#!/usr/bin/env bash
# CI set-up on a GitHub-hosted runner: the Debian packages of scripts/system-packages.txt (with sudo:
# the runner user is not root), then exactly the set-up a developer runs (scripts/bootstrap.sh), then
# the one plugin that set-up cannot build; and no automatic log of the CLI, which nobody on a runner reads.
# Usage: bash scripts/ci/setup.sh
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ "$(id -u)" != 0 ]; then
    mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$here/../system-packages.txt")
    sudo DEBIAN_FRONTEND=noninteractive apt-get update -qq
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}"
fi
bash "$here/../bootstrap.sh"
# The Hetzner Cloud resource plugin (the control plane's firewall): the Go module proxy refuses
# pulumi-hcloud's provider module, so it is not built like the Kubernetes plugin but downloaded from
# Pulumi's releases, at the version the pulumi-hcloud SDK pinned in pyproject.toml asks the engine for
# (tests/components/test_control_plane_firewall.py holds the two together). Into the PULUMI_HOME that
# env.sh sets, where deploy.sh and preview.sh look.
# shellcheck source=scripts/env.sh
source "$here/../env.sh"
pulumi plugin install resource hcloud v1.43.3
bash "$here/quiet-cli-log.sh"
