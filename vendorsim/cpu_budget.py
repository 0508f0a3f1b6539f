"""A CPU budget for the simulated boxes: a cgroup with a CPU quota that every box process joins.

A real box has CPUs of its own. Here every box shares this machine's with the engine, and a
self-join is mostly kernel work in the sandbox (a bash per shimmed command, overlay mounts): 64 joins
at once kept both cores busy, two thirds of it system time, and the CLI's threads waited on the run
queue 2.5 thread-seconds per second, at any niceness or scheduling class of the boxes (bench/README.md).
A quota is what holds kernel time too. Used by `python -m vendorsim --box-cpus` (the adoption
benchmark); the tests and the dev stack run without one.

Linux cgroup v2 (`cpu.max`, the controller enabled for the root's children) or v1 (`cpu` hierarchy,
`cpu.cfs_quota_us`), as root.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

PERIOD_US = 100_000
CGROUP_ROOT = Path("/sys/fs/cgroup")
PREFIX = "vendorsim-boxes-"


class BudgetError(Exception):
    """No cgroup CPU controller this process may use."""


def create(cpus: float, *, root: Path = CGROUP_ROOT, owner: int | None = None) -> Path:
    """A new cgroup capped at `cpus` CPUs (0.01 or more); returns the file a process writes its pid
    into to join it. Empty budgets of vendorsims that are gone are removed first."""
    if cpus < 0.01:
        raise BudgetError(f"a CPU budget must be at least 0.01 CPUs, not {cpus:g}")
    pid = os.getpid() if owner is None else owner
    quota = str(round(cpus * PERIOD_US))
    if "cpu" in _read(root / "cgroup.controllers").split():
        if "cpu" not in _read(root / "cgroup.subtree_control").split():
            _write(root / "cgroup.subtree_control", "+cpu")
        group = _fresh(root, pid)
        _write(group / "cpu.max", f"{quota} {PERIOD_US}")
        return group / "cgroup.procs"
    v1 = root / "cpu"
    if (v1 / "cpu.cfs_quota_us").exists():
        group = _fresh(v1, pid)
        _write(group / "cpu.cfs_period_us", str(PERIOD_US))
        _write(group / "cpu.cfs_quota_us", quota)
        return group / "tasks"
    raise BudgetError(
        f"no cgroup CPU controller under {root} (v2: 'cpu' in cgroup.controllers; v1: cpu/cpu.cfs_quota_us)"
    )


def remove(procs_file: Path) -> None:
    """Remove the budget's cgroup once its processes are gone (a cgroup with members stays)."""
    with contextlib.suppress(OSError):
        procs_file.parent.rmdir()


def _fresh(hierarchy: Path, pid: int) -> Path:
    for stale in hierarchy.glob(f"{PREFIX}*"):
        owner = stale.name.removeprefix(PREFIX)
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            remove(stale / "tasks")
    group = hierarchy / f"{PREFIX}{pid}"
    try:
        group.mkdir(exist_ok=True)
    except OSError as e:
        raise BudgetError(f"cannot create the cgroup {group}: {e.strerror}") from None
    return group


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError as e:
        raise BudgetError(f"cannot write {value!r} to {path}: {e.strerror}") from None
