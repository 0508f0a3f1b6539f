"""Kura's local storage on the real control plane: a Kura-sized claim binds to a volume of the box the
scheduler puts the Kura pod on (the real PV controller and the scheduler's volume binding judge
it), a claim larger than a volume binds nowhere, and the release of the box deletes the claim
(providers/kube.py, as the machine provider calls it) after which the volume goes too."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from components.k8s import POOL_LABEL
from components.storage import LocalStorageClass, LocalStorageClassArgs, LocalVolumes, LocalVolumesArgs
from config.models import Region
from providers.kube import delete_node_local_pvcs
from tests.cluster.k8s_support import apply, rendered, suffix
from tests.support.cluster import KubeCluster, Kubelet, wait_until

TAINT = {"key": "tuist.dev/kura-cache", "operator": "Equal", "value": "true", "effect": "NoSchedule"}


def region(pool: str) -> Region:
    return Region(
        id="eu-central",
        cluster_id="eu-central-1",
        fleet=pool,
        ingress_class="kura-eu-central",
        egress_burst_mbps=500,
        host="eu-central.staging.kura.tuist.dev",
        failover_ip=None,
        volumes_per_box=2,
    )


@pytest.fixture
def box(kube_cluster: KubeCluster, join: Callable[..., Kubelet]) -> Iterator[tuple[str, str, Region]]:
    """One fleet box with its region's volumes, and a namespace for Kura."""
    pool = f"kura-storage-{suffix()}"
    node = f"{pool}-0"
    join(node, labels={POOL_LABEL: pool}, taints=["tuist.dev/kura-cache=true:NoSchedule"])
    reg = region(pool)
    apply(
        kube_cluster, rendered(lambda: LocalStorageClass("sc", LocalStorageClassArgs(name=reg.storage_class)))
    )
    apply(
        kube_cluster, rendered(lambda: LocalVolumes("vols", LocalVolumesArgs(region=reg, node_names=[node])))
    )
    kube_cluster.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=pool)))
    yield pool, node, reg
    kube_cluster.delete_namespace(pool)
    for pv in kube_cluster.core.list_persistent_volume().items:
        if pv.metadata.name.startswith(f"kura-{node}-"):
            kube_cluster.core.delete_persistent_volume(pv.metadata.name)


def claim(name: str, size: str, storage_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }


def kura_pod(name: str, pool: str, claim_name: str) -> dict[str, Any]:
    """Where kura-controller puts a Kura instance: the region's pool, tolerating its taint."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {POOL_LABEL: pool},
            "tolerations": [TAINT],
            "containers": [
                {
                    "name": "kura",
                    "image": "ghcr.io/tuist/kura:0.10.5",
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
    }


def test_a_kura_sized_claim_binds_on_the_fleet_box_and_goes_with_its_release(
    kube_cluster: KubeCluster, box: tuple[str, str, Region]
) -> None:
    ns, node, reg = box
    core = kube_cluster.core
    core.create_namespaced_persistent_volume_claim(ns, claim("data-kura-acme-0", "50Gi", reg.storage_class))
    # WaitForFirstConsumer: nothing binds until a pod needs the claim.
    assert core.read_namespaced_persistent_volume_claim("data-kura-acme-0", ns).status.phase == "Pending"
    core.create_namespaced_pod(ns, kura_pod("kura-acme-0", ns, "data-kura-acme-0"))

    bound = wait_until(
        "the claim to bind",
        lambda: (
            (c := core.read_namespaced_persistent_volume_claim("data-kura-acme-0", ns)).status.phase
            == "Bound"
            and c
        ),
        timeout=60,
    )
    pv = core.read_persistent_volume(bound.spec.volume_name)
    assert pv.metadata.name.startswith(f"kura-{node}-")
    assert pv.spec.capacity["storage"] == "50Gi"
    assert (
        wait_until(
            "the pod to be scheduled", lambda: core.read_namespaced_pod("kura-acme-0", ns).spec.node_name
        )
        == node
    )

    # Release: the box is drained, then its node-local claims are deleted (providers/kube.py).
    core.delete_namespaced_pod("kura-acme-0", ns, grace_period_seconds=0)
    wait_until("the pod to go", lambda: not core.list_namespaced_pod(ns).items, timeout=60)
    # Pulumi deletes the volume first (it depends on the machine): it waits for its claim.
    core.delete_persistent_volume(pv.metadata.name)
    assert core.read_persistent_volume(pv.metadata.name).metadata.deletion_timestamp is not None
    assert delete_node_local_pvcs(kube_cluster.api, node) == [f"{ns}/data-kura-acme-0"]

    def volume_gone() -> bool:
        try:
            core.read_persistent_volume(pv.metadata.name)
        except k8s.ApiException as error:
            return error.status == 404
        return False

    wait_until("the volume to go once its claim is gone", volume_gone, timeout=60)


def test_a_claim_larger_than_a_volume_binds_nowhere(
    kube_cluster: KubeCluster, box: tuple[str, str, Region]
) -> None:
    ns, _, reg = box
    core = kube_cluster.core
    core.create_namespaced_persistent_volume_claim(ns, claim("too-big", "60Gi", reg.storage_class))
    core.create_namespaced_pod(ns, kura_pod("too-big", ns, "too-big"))

    def unschedulable() -> bool:
        pod = core.read_namespaced_pod("too-big", ns)
        return any(
            c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or []
        )

    wait_until("the scheduler to give up on the pod", unschedulable, timeout=60)
    assert core.read_namespaced_persistent_volume_claim("too-big", ns).status.phase == "Pending"


def test_the_box_holds_exactly_volumes_per_box_claims(
    kube_cluster: KubeCluster, box: tuple[str, str, Region]
) -> None:
    ns, node, reg = box
    core = kube_cluster.core
    for i in range(reg.volumes_per_box + 1):
        core.create_namespaced_persistent_volume_claim(ns, claim(f"data-{i}", "50Gi", reg.storage_class))
        core.create_namespaced_pod(ns, kura_pod(f"kura-{i}", ns, f"data-{i}"))

    def phases() -> list[str]:
        return sorted(c.status.phase for c in core.list_namespaced_persistent_volume_claim(ns).items)

    wait_until(
        f"{reg.volumes_per_box} claims bound",
        lambda: phases().count("Bound") == reg.volumes_per_box,
        timeout=60,
    )
    assert phases() == ["Bound"] * reg.volumes_per_box + ["Pending"]
    bound = [
        c.spec.volume_name
        for c in core.list_namespaced_persistent_volume_claim(ns).items
        if c.spec.volume_name
    ]
    assert all(name.startswith(f"kura-{node}-") for name in bound)
