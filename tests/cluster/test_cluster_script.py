"""scripts/cluster.sh's launch and wait: a component not yet exec'd is still starting, not gone."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster.sh"


def _functions(*names: str) -> str:
    """The named shell functions of cluster.sh as its text has them (the script itself runs on load)."""
    text = CLUSTER_SH.read_text()
    out = []
    for name in names:
        start = text.index(f"\n{name}() {{") + 1
        first_line = text[start : text.index("\n", start) + 1]
        end = start + len(first_line) if first_line.rstrip().endswith("}") else text.index("\n}\n", start) + 3
        out.append(text[start:end])
    return "".join(out)


def test_a_component_slow_to_exec_is_waited_for_not_reported_gone(tmp_path: Path):
    # Its command line names the cluster's folder only once it has exec'd its last program, 1.5 s
    # after launch (every stage before it, setsid and sh included, names no folder: DATA comes in
    # through the environment): until then pid_of does not know it. launch returns once it runs;
    # the wait then sees it.
    script = _functions("die", "pid_of", "launch", "wait_for") + f"""
dir={tmp_path}
DATA="$dir/etcd" launch etcd sh -c 'sleep 1.5; touch "$DATA.ready"; exec tail -f "$DATA.ready"'
wait_for "etcd health" 20 etcd test -e "$dir/etcd.ready"
echo ready
kill "$(cat "$dir/pids/etcd.pid")"
"""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ready\n", "")


def test_a_component_that_exits_is_reported_with_its_log(tmp_path: Path):
    script = _functions("die", "pid_of", "launch", "wait_for") + f"""
dir={tmp_path}
launch etcd sh -c 'echo "bind: address already in use"; exit 3'
wait_for "etcd health" 20 etcd false
"""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr == (
        "bind: address already in use\n"
        f"cluster: etcd exited while waiting for etcd health (log: {tmp_path}/logs/etcd.log)\n"
    )
