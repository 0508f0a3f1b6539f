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
# Workers: two per core, at most 8. The tests wait on things outside the worker a good part of their
# time (the engine, sshd, the control plane's node monitor, vendorsim's simulated latency): with
# cores + 1 the 2-core machine was at most 63% busy. Measured there one after the other, quiet,
# 2,040 tests: 3 workers 11 min 34 s, 4 workers 10 min 17 s, the same CPU (881 and 893 CPU-seconds:
# README, Tests). More is slower: at four the cores are 91% busy (`python -m bench suite`), and six
# took 9 min 31 s against four's 8 min 20 s and 8 min 32 s (2026-12-03). Each test file is one work
# unit, except the files that use the session's control plane: they share one unit per two workers,
# one control plane each (tests/support/xdist_units.py, a plugin that gives `--dist loadfile` that
# scheduler); tests/conftest.py sends the longest units out first. `-n 0` after it (or
# TEST_WORKERS=0) runs everything in one process.
cores=$(nproc)
workers=${TEST_WORKERS:-$((cores * 2 > 8 ? 8 : cores * 2))}
echo "==> pytest on $workers workers (in a network namespace of its own)"
# The run gets a TMPDIR of its own, removed at its end (scripts/private-tmp.sh): each Kubernetes plugin
# the tests start leaves a kubeconfig there. pytest's own folders stay where they were (the last three
# runs kept, for a failure's logs).
export PYTEST_DEBUG_TEMPROOT="${PYTEST_DEBUG_TEMPROOT:-${TMPDIR:-/tmp}}"
exec bash "$here/private-tmp.sh" bash "$here/netns.sh" exec -- \
    python -m pytest -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
