"""Fixtures every test directory may use.

`tests.support.cluster` is loaded once here, as a plugin, so its session-scoped `kube_cluster` (a real
control plane: scripts/cluster.sh) is one per test session however many directories use it.
"""

pytest_plugins = ["tests.support.cluster"]
