"""One real control plane per session (tests/support/cluster.py), and fleets that may join it.

`fleet_rbac(fleet)` applies exactly what components/node_bootstrap.py renders for `fleet` (rendered
under Pulumi mocks, applied with kubectl), so a test joins a kubelet with the program's own RBAC.
`join(...)` makes a bootstrap token the way the program does (providers/kube.py) and starts a
kubelet stand-in with it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as kclient

from providers.kube import BootstrapToken, create_bootstrap_token
from tests.support.cluster import (
    KubeCluster,
    Kubelet,
    Kubelets,
    apply_node_bootstrap,
    wait_until,
)


@pytest.fixture(scope="session")
def fleet_rbac(kube_cluster: KubeCluster) -> Callable[[str], None]:
    applied: set[str] = set()

    def apply(fleet: str) -> None:
        if fleet not in applied:
            apply_node_bootstrap(kube_cluster, [fleet])
            applied.add(fleet)

    return apply


def node_ready(cluster: KubeCluster, name: str) -> kclient.V1Node | None:
    try:
        node = cluster.core.read_node(name)
    except kclient.ApiException as error:
        if error.status == 404:
            return None
        raise
    ready = [c for c in node.status.conditions or [] if c.type == "Ready"]
    return node if ready and ready[0].status == "True" else None


@pytest.fixture
def join(
    kube_cluster: KubeCluster,
    kubelets: Kubelets,
    fleet_rbac: Callable[[str], None],
) -> Iterator[Callable[..., Kubelet]]:
    """join(name, fleet="cluster-tests", rbac=True, wait=True, **standin options) -> Kubelet."""

    def start(
        name: str, *, fleet: str = "cluster-tests", rbac: bool = True, wait: bool = True, **options: object
    ) -> Kubelet:
        if rbac:
            fleet_rbac(fleet)
        token = BootstrapToken.generate()
        create_bootstrap_token(
            kube_cluster.api, token, fleet=fleet, node_name=name, ttl=dt.timedelta(minutes=30)
        )
        kubelet = kubelets.start(name, token.value, **options)  # type: ignore[arg-type]
        if wait:
            wait_until(f"node {name} Ready", lambda: node_ready(kube_cluster, name), timeout=90)
        return kubelet

    yield start
