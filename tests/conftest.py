"""Fixtures every test directory may use.

The whole session runs in a network namespace of its own (tests/support/netns.py): the simulated
boxes' addresses live there, and nothing a test starts meets another run's ports.

`tests.support.cluster` is loaded once here, as a plugin, so its session-scoped `kube_cluster` (a real
control plane: scripts/cluster.sh) is one per test session however many directories use it.
"""

import pytest

from tests.support.netns import ensure_isolated

ensure_isolated()

pytest_plugins = ["tests.support.cluster"]


# --- the order of the run, for pytest-xdist (scripts/test.sh: `--dist loadfile`) ------------------
#
# A work unit is one test file (its module fixtures are built once; the session's control plane,
# `kube_cluster`, at most once per worker). The units go out in collection order, so the longest
# come first and none of them starts last and runs alone: the end-to-end files (the real engine,
# minutes each), then the files of tests/cluster (the control plane), then the rest as collected.
# Without xdist this changes only the order of files.


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    if path.startswith("tests/e2e/") or item.get_closest_marker("e2e") is not None:
        return 0
    return 1 if path.startswith("tests/cluster/") else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: collection order within a rank, so each file stays together
