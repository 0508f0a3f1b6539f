"""Fixtures every test directory may use.

The whole session runs in a network namespace of its own (tests/support/netns.py): the simulated
boxes' addresses live there, and nothing a test starts meets another run's ports.

`tests.support.cluster` is loaded once here, as a plugin, so its session-scoped `kube_cluster` (a real
control plane: scripts/cluster.sh) is one per test session however many directories use it.
"""

from tests.support.netns import ensure_isolated

ensure_isolated()

pytest_plugins = ["tests.support.cluster"]
