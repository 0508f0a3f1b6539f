"""scripts/vendorsim.sh status and stop trust a pidfile only for the vendorsim of their state directory.

The pidfile (build/vendorsim/vendorsim.pid) outlives a reboot, and its pid may since be another
process's: status must not report that one running (start would then exit 0 with no vendorsim), nor
stop SIGTERM it. The state directory is a temporary one (VENDORSIM_STATE_DIR); the processes are
Python sleeping, with the command lines below; nothing here starts vendorsim or needs its namespace.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
VENDORSIM_SH = REPO / "scripts" / "vendorsim.sh"
SLEEP = "import time; time.sleep(120)"


@pytest.fixture
def state(tmp_path: Path) -> Path:
    state = tmp_path / "vendorsim"
    state.mkdir()
    return state


def _alive(pid: int) -> bool:
    """pid is still a sleeper of this test (not gone, and not a reused pid)."""
    try:
        return SLEEP.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


@pytest.fixture
def spawn() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _sleeper(pids: list[int], state: Path, *args: str) -> int:
    """A sleeping process with ARGS on its command line, its pid in the pidfile. A shell that exits at
    once starts it, so it is no child of this test (as vendorsim is none of the vendorsim.sh that
    stops it): a child stopped would stay a zombie, which kill -0 still finds, until the test reaped it."""
    out = subprocess.run(
        [
            "bash",
            "-c",
            '"$@" </dev/null >/dev/null 2>&1 & echo $!',
            "spawn",
            sys.executable,
            "-c",
            SLEEP,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    ).stdout
    pid = int(out)
    pids.append(pid)
    deadline = time.monotonic() + 10
    while not _alive(pid):  # until it has exec'd python
        assert time.monotonic() < deadline, "the sleeper did not start"
        time.sleep(0.02)
    (state / "vendorsim.pid").write_text(f"{pid}\n")
    return pid


def _vendorsim(state: Path, cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(VENDORSIM_SH), cmd],
        env={**os.environ, "VENDORSIM_STATE_DIR": str(state)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    "args",
    [(), ("-m", "vendorsim", "--state", "/elsewhere/vendorsim", "--port", "8710")],
    ids=["an unrelated process", "the vendorsim of another state directory"],
)
def test_a_pid_that_is_not_this_vendorsim_is_stopped_and_left_alone(
    state: Path, spawn: list[int], args: tuple[str, ...]
):
    other = _sleeper(spawn, state, *args)
    status = _vendorsim(state, "status")
    assert (status.returncode, status.stdout) == (1, "stopped\n"), status.stderr
    stop = _vendorsim(state, "stop")
    assert stop.returncode == 0, stop.stderr
    assert _alive(other), "vendorsim.sh stop signalled a process that is not its vendorsim"
    assert not (state / "vendorsim.pid").exists()


def test_this_vendorsim_is_running_and_stopped(state: Path, spawn: list[int]):
    # The command line vendorsim.sh start gives it (python -m vendorsim ... --state STATE ...).
    ours = _sleeper(
        spawn, state, "-m", "vendorsim", "--inventory", "x.yaml", "--state", str(state), "--port", "8710"
    )
    status = _vendorsim(state, "status")
    assert (status.returncode, status.stdout) == (0, f"running (pid {ours})\n"), status.stderr
    stop = _vendorsim(state, "stop")
    assert stop.returncode == 0, stop.stderr
    assert not _alive(ours)
    assert not (state / "vendorsim.pid").exists()
