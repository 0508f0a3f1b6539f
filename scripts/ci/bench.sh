#!/usr/bin/env bash
# Issue 16's benchmarks as gates (bench/goals.py) on a GitHub runner: each benchmark with --gate, all
# of them run even when one fails, and the job fails if any did. Each one's output goes to
# bench-results/<name>.txt as well (the workflow keeps the folder). As root, through sudo like
# scripts/ci/test.sh: the adoption and no-change benchmarks run their boxes in a network namespace of
# their own (scripts/netns.sh).
#
#   bash scripts/ci/bench.sh quick   a pull request's: adoption N = 1, 16; preview x1, x10, x30;
#                                    the program under mocks x1, x10; the no-change preview
#   bash scripts/ci/bench.sh full    the night's: adoption up to N = 64; preview on the file and S3
#                                    backends; under mocks up to x100; the no-change preview; the suite
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
mode=${1:-}
case "$mode" in
    quick | full) ;;
    *) echo "usage: bash scripts/ci/bench.sh quick|full" >&2; exit 2 ;;
esac
if [ "$(id -u)" != 0 ]; then
    exec sudo -E env "PATH=$PATH" bash "$root/scripts/ci/bench.sh" "$mode"
fi
cd "$root"
# shellcheck source=scripts/env.sh
source scripts/env.sh
python=.venv/bin/python
out=bench-results
mkdir -p "$out"

failed=()
gate() {  # gate NAME CMD...: run one benchmark, keep its output, note a failure and go on
    local name=$1
    shift
    printf '==> %s: %s\n' "$name" "$*"
    local start=$SECONDS
    if "$@" 2>&1 | tee "$out/$name.txt"; then
        printf '<== %s: passed in %ss\n' "$name" $((SECONDS - start))
    else
        printf '<== %s: FAILED in %ss\n' "$name" $((SECONDS - start))
        failed+=("$name")
    fi
}

if [ "$mode" = quick ]; then
    gate adoption bash scripts/netns.sh exec -- "$python" -m bench adoption --sizes 1,16 --gate
    gate preview "$python" -m bench.preview engine --times 1,10,30 --gate
    gate evaluate "$python" -m bench.preview evaluate --times 1,10 --gate
else
    gate adoption bash scripts/netns.sh exec -- "$python" -m bench adoption --sizes 1,16,64 --gate
    gate preview "$python" -m bench.preview engine --times 1,10,30 --backend both --gate
    gate evaluate "$python" -m bench.preview evaluate --times 1,10,100 --gate
fi
gate nochange bash scripts/netns.sh exec -- "$python" -m bench.preview nochange --gate
if [ "$mode" = full ]; then
    gate suite "$python" -m bench suite --gate
fi

if [ "${#failed[@]}" -gt 0 ]; then
    echo "benchmark gates failed: ${failed[*]}" >&2
    exit 1
fi
echo "every benchmark gate passed"
