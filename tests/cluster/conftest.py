"""tests/cluster uses the session's control plane and its fixtures (`kube_cluster`, `kubelets`,
`fleet_rbac`, `join`: tests/support/cluster.py, loaded for every directory by tests/conftest.py)."""
