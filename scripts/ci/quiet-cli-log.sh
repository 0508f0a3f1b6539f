#!/usr/bin/env bash
# Turns off the Pulumi CLI's automatic log on a CI runner: a file where the CLI would make
# $PULUMI_HOME/logs (the CLI then says `automatic logging unavailable` and carries on; the test
# suite's homes do the same: tests/support/pulumi_home.py). The log is a Debug-level record of every
# command, encrypted with the stack's secrets provider, that a GitHub-hosted runner throws away with
# the job; it cost about 40% of the CLI's CPU in a preview of the dev stack grown x30
# (docs/backends.md). A job is read from its own output. An operator's machine keeps its log: only
# scripts/ci/setup.sh calls this.
# Usage: PULUMI_HOME=... bash scripts/ci/quiet-cli-log.sh
set -euo pipefail
home=${PULUMI_HOME:?quiet-cli-log.sh: PULUMI_HOME is not set (source scripts/env.sh first)}
logs="$home/logs"
if [ -d "$logs" ]; then
    # A runner that is not new (self-hosted): its earlier logs are left where they are, and kept up.
    echo "quiet-cli-log: $logs is a folder already: the CLI keeps logging there" >&2
    exit 0
fi
mkdir -p "$home"
touch "$logs"
echo "quiet-cli-log: the Pulumi CLI writes no automatic log under $home"
