"""vendorsim.cpu_budget: the cgroup the simulated boxes share, on either cgroup version's layout."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from vendorsim import cpu_budget
from vendorsim.cpu_budget import BudgetError

DEAD_PID = 4_194_303  # above any pid_max this kernel hands out by default


def test_on_cgroup_v1_a_budget_is_a_cpu_group_with_its_quota(tmp_path: Path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")

    procs = cpu_budget.create(1.5, root=tmp_path, owner=41)

    group = tmp_path / "cpu" / "vendorsim-boxes-41"
    assert procs == group / "tasks"
    assert (group / "cpu.cfs_period_us").read_text() == "100000"
    assert (group / "cpu.cfs_quota_us").read_text() == "150000"


def test_on_cgroup_v2_the_cpu_controller_is_enabled_for_children_and_the_quota_set(tmp_path: Path):
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (tmp_path / "cgroup.subtree_control").write_text("memory pids\n")

    procs = cpu_budget.create(0.5, root=tmp_path, owner=42)

    group = tmp_path / "vendorsim-boxes-42"
    assert procs == group / "cgroup.procs"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+cpu"
    assert (group / "cpu.max").read_text() == "50000 100000"


def test_a_budget_of_a_gone_vendorsim_is_removed_and_a_running_ones_kept(tmp_path: Path):
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1\n")
    (tmp_path / "cpu" / f"vendorsim-boxes-{DEAD_PID}").mkdir()
    (tmp_path / "cpu" / f"vendorsim-boxes-{os.getppid()}").mkdir()

    cpu_budget.create(1, root=tmp_path, owner=43)

    assert sorted(p.name for p in (tmp_path / "cpu").glob("vendorsim-boxes-*")) == sorted(
        ["vendorsim-boxes-43", f"vendorsim-boxes-{os.getppid()}"]
    )


def test_no_cpu_controller_or_a_tiny_budget_is_an_error_naming_what_is_missing(tmp_path: Path):
    with pytest.raises(BudgetError, match=re.escape(f"no cgroup CPU controller under {tmp_path} ")):
        cpu_budget.create(1, root=tmp_path)
    with pytest.raises(BudgetError, match=re.escape("at least 0.01 CPUs, not 0.001")):
        cpu_budget.create(0.001, root=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_this_machine_has_a_cpu_controller_the_benchmark_can_use():
    procs = cpu_budget.create(0.5, owner=os.getpid())
    try:
        assert procs.exists()
    finally:
        cpu_budget.remove(procs)
    assert not procs.parent.exists()
