"""scripts/cluster.sh's own wait: a component not yet exec'd is still starting, not gone."""

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


def test_wait_for_waits_on_a_component_whose_shell_has_not_exec_d_it_yet(tmp_path: Path):
    # The launched shell sleeps before its exec, as a loaded machine can make it: its command line
    # is not the component's and its log does not exist yet. Ready once the flag file appears.
    script = _functions("die", "running", "wait_for") + f"""
dir={tmp_path}
mkdir -p "$dir/pids"
( sleep 1.5; touch "$dir/ready"; exec sleep 30 ) &
echo $! >"$dir/pids/etcd.pid"
wait_for "etcd health" 20 etcd test -e "$dir/ready"
echo ready
kill "$(cat "$dir/pids/etcd.pid")"
"""
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ready\n", "")


def test_wait_for_reports_a_component_that_exited(tmp_path: Path):
    script = _functions("die", "running", "wait_for") + f"""
dir={tmp_path}
mkdir -p "$dir/pids" "$dir/logs"
echo "bind: address already in use" >"$dir/logs/etcd.log"
( exit 3 ) &
echo $! >"$dir/pids/etcd.pid"
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
