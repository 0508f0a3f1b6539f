"""A pytest plugin: pytest-xdist's `--dist loadfile`, with the files that use the control plane grouped.

A work unit is one test file, as under `loadfile`, except the files whose tests use the fixture
`kube_cluster` (tests/support/cluster.py): each worker that runs any of them starts a control plane of
its own (about 9 CPU-s to start and 2 CPU-s a minute to keep, on a machine whose run is CPU-bound), so
they form `kube_groups(workers)` units, one control plane each: 2 on 4 workers instead of 4. xdist's
own `--dist loadgroup` would group them by marks, but it stopped grouping under pytest 9.2 (it renames
node ids, which pytest 9.2 no longer reads: pytest-dev/pytest-xdist#1386) and hands out every
unmarked test on its own.

Which files use the control plane is known where they are collected, from each test's fixtures: each
worker writes it to a file the controller named for it, and the controller's scheduler reads it when
it splits the collection into units, which xdist does once every worker has collected. The groups are
also on `config.stash[KUBE_GROUPS]` for the suite's own ordering (tests/conftest.py). Nothing depends
on the grouping for correctness: a file run on any worker starts the control plane there if needed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

KUBE_CLUSTER = "kube_cluster"
# Seconds each file using it took in a run (2026-12-03, 4 workers on 2 cores), to split them into
# groups of about equal length. A stale or missing figure costs balance, never a test (unlisted: 20).
KUBE_FILE_SECONDS = {
    "tests/providers/test_machine_vendorsim.py": 95,
    "tests/providers/test_kube.py": 75,
    "tests/cluster/test_join.py": 66,
    "tests/providers/ssh/test_self_join.py": 65,
    "tests/cluster/test_node_bootstrap_rbac.py": 63,
    "tests/watcher/test_loop.py": 57,
    "tests/cluster/test_k8s_demux_roll.py": 56,
    "tests/ops/test_orphans.py": 43,
    "tests/providers/test_machine_record_cluster.py": 35,
    "tests/cluster/test_program_rbac.py": 35,
    "tests/cluster/test_control_plane.py": 33,
    "tests/cluster/test_k8s_kura_controller.py": 30,
    "tests/cluster/test_k8s_peer_demux.py": 26,
    "tests/ops/test_cluster.py": 21,
    "tests/cluster/test_pods.py": 21,
    "tests/watcher/test_released_volumes.py": 30,
}
# file -> group number, on a worker's config once it collected.
KUBE_GROUPS = pytest.StashKey[dict[str, int]]()
_UNITS = pytest.StashKey[Path]()
_UNITS_INPUT = "tuist_units"


def kube_groups(workers: int) -> int:
    """Control planes for a run of `workers` workers: one per two workers (at least one)."""
    return max(1, workers // 2)


def split(
    files: Iterable[str], seconds: Mapping[str, float], groups: int, default: float = 20
) -> dict[str, int]:
    """file -> group: longest file first, into the group with the least so far."""
    load = [0.0] * groups
    group_of: dict[str, int] = {}
    for path in sorted(files, key=lambda f: (-seconds.get(f, default), f)):
        group = load.index(min(load))
        group_of[path] = group
        load[group] += seconds.get(path, default)
    return group_of


def _path(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


class ControlPlaneFileScheduling(LoadFileScheduling):
    """`loadfile`, except that the files the workers named share one unit per group."""

    def __init__(self, config: Any, log: Any, units: Path) -> None:
        super().__init__(config, log)
        self._units_file = units
        self._units: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._units is None:
            # No file: no worker collected a file that uses the control plane.
            self._units = json.loads(self._units_file.read_text()) if self._units_file.exists() else {}
        path = super()._split_scope(nodeid)
        return self._units.get(path, path)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") == "loadfile":
        config.stash[_UNITS] = Path(tempfile.mkdtemp(prefix="tuist-xdist-units-")) / "units.json"


def pytest_unconfigure(config: pytest.Config) -> None:
    if _UNITS in config.stash:
        shutil.rmtree(config.stash[_UNITS].parent, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if _UNITS in node.config.stash:
        node.workerinput[_UNITS_INPUT] = str(node.config.stash[_UNITS])


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if _UNITS not in config.stash:
        return None  # xdist's own
    return ControlPlaneFileScheduling(config, log, config.stash[_UNITS])


@pytest.hookimpl(tryfirst=True)  # before the suite's ordering, which reads KUBE_GROUPS
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput: dict[str, Any] = getattr(config, "workerinput", {})
    if _UNITS_INPUT not in workerinput:
        config.stash[KUBE_GROUPS] = {}
        return
    files = dict.fromkeys(_path(i.nodeid) for i in items if KUBE_CLUSTER in i.fixturenames)
    group_of = split(files, KUBE_FILE_SECONDS, kube_groups(int(workerinput["workercount"])))
    config.stash[KUBE_GROUPS] = group_of
    # Every worker writes the same, each whole, by rename: the scheduler never reads half of one.
    units = Path(workerinput[_UNITS_INPUT])
    part = units.with_name(f"{units.name}.{os.getpid()}")
    part.write_text(json.dumps({file: f"kube-cluster-{group}" for file, group in group_of.items()}))
    os.replace(part, units)
