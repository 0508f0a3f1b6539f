"""kura-controller on the real control plane: its objects are accepted as rendered, a change of one
of the seeds' knobs rolls it (the deployment controller starts a new ReplicaSet whose pods carry the
new value), and its RBAC allows what it does and nothing near it."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from components.kura_controller import KuraController, KuraControllerArgs, RegionPlacement
from config.models import Cluster, Environment, FailoverIP, Fleet, Hardware, Kura, Region, Vendor
from tests.cluster.k8s_support import apply, can, rendered, sa, suffix
from tests.support.cluster import KubeCluster, wait_until

FLEET = Fleet(
    name="kura-ovh",
    vendor=Vendor.OVH,
    marker="tuist-kura-staging",
    size=2,
    node_pool="kura-ovh",
    hardware=Hardware(offer="SYS-1", threads=12, memory_gib=32),
)
REGION = Region(
    id="ca-east",
    cluster_id="ca-east-1",
    fleet="kura-ovh",
    ingress_class="kura-ca-east",
    egress_burst_mbps=500,
    host="ca-east.staging.kura.tuist.dev",
    failover_ip="kura-peer-ca-east",
)
FIP = FailoverIP(name="kura-peer-ca-east", vendor=Vendor.OVH, fleet="kura-ovh", address="203.0.113.9")
CLUSTER = Cluster(runners_controller_image="ghcr.io/tuist/runners-controller:1.0.0")


def manifests(kura: Kura) -> list[dict[str, Any]]:
    args = KuraControllerArgs(
        placements=[RegionPlacement(REGION, FLEET, FIP)],
        kura=kura,
        environment=Environment.STAGING,
        cluster=CLUSTER,
    )
    return rendered(lambda: KuraController("kura-controller", args))


@pytest.fixture
def kura() -> Kura:
    return Kura(
        namespace=f"kura-{suffix()}",
        runtime_image_tag="0.10.5",
        controller_image="ghcr.io/tuist/kura-controller:1.4.0",
        failover_watcher_image="ghcr.io/tuist/tuist-infra-watcher:1.0.0",
    )


def replica_sets(cluster: KubeCluster, namespace: str) -> list[k8s.V1ReplicaSet]:
    items = (
        k8s.AppsV1Api(cluster.api)
        .list_namespaced_replica_set(namespace, label_selector="app.kubernetes.io/name=kura-controller")
        .items
    )
    # Oldest first by the Deployment's revision: creation timestamps have one-second resolution.
    return sorted(items, key=lambda rs: int(rs.metadata.annotations["deployment.kubernetes.io/revision"]))


def env_of(rs: k8s.V1ReplicaSet) -> dict[str, str]:
    [container] = rs.spec.template.spec.containers
    return {e.name: e.value for e in container.env if e.value is not None}


def test_a_knob_change_rolls_the_controller_to_a_new_replica_set(
    kube_cluster: KubeCluster, kura: Kura
) -> None:
    ns = kura.namespace
    apply(kube_cluster, manifests(kura))
    [first] = wait_until("the first ReplicaSet", lambda: replica_sets(kube_cluster, ns) or None)
    assert env_of(first)["KURA_TMP_DIR_MAX_BYTES"] == str(8 * 1024**3)
    assert "KURA_GLOBAL_DISCOVERY_DNS_NAME" not in env_of(first)

    # Seed 001's knob: the tmp budget halves.
    apply(kube_cluster, manifests(kura.model_copy(update={"bootstrap_tmp_dir_max_bytes": 4 * 1024**3})))

    def two() -> list[k8s.V1ReplicaSet] | None:
        found = replica_sets(kube_cluster, ns)
        return found if len(found) == 2 else None

    old, new = wait_until("a second ReplicaSet", two)
    hash_label = "pod-template-hash"
    assert old.metadata.labels[hash_label] != new.metadata.labels[hash_label]
    assert env_of(new)["KURA_TMP_DIR_MAX_BYTES"] == str(4 * 1024**3)
    assert {k: v for k, v in env_of(new).items() if k != "KURA_TMP_DIR_MAX_BYTES"} == {
        k: v for k, v in env_of(old).items() if k != "KURA_TMP_DIR_MAX_BYTES"
    }
    kube_cluster.delete_namespace(ns)


def test_reapplying_the_same_settings_rolls_nothing(kube_cluster: KubeCluster, kura: Kura) -> None:
    apply(kube_cluster, manifests(kura))
    wait_until("the first ReplicaSet", lambda: replica_sets(kube_cluster, kura.namespace) or None)
    apply(kube_cluster, manifests(kura))
    assert len(replica_sets(kube_cluster, kura.namespace)) == 1
    kube_cluster.delete_namespace(kura.namespace)


def test_its_rbac_allows_what_it_does_and_nothing_near_it(kube_cluster: KubeCluster, kura: Kura) -> None:
    ns = kura.namespace
    apply(kube_cluster, manifests(kura))
    me = sa(ns, "kura-controller")
    allowed = [
        ("create", "statefulsets", "apps", ns, None),
        ("delete", "services", "", ns, None),
        ("watch", "pods", "", ns, None),
        ("delete", "persistentvolumeclaims", "", ns, None),
        ("update", "kurainstances", "kura.tuist.dev", ns, None),
        ("list", "nodes", "", None, None),
        # The peer TLS Secret its pods mount, and the informer it starts on Secrets.
        ("create", "secrets", "", ns, None),
        ("watch", "secrets", "", ns, None),
        ("create", "dnsendpoints", "externaldns.k8s.io", ns, None),
        ("create", "networkpolicies", "networking.k8s.io", ns, None),
        ("create", "poddisruptionbudgets", "policy", ns, None),
        ("delete", "certificates", "cert-manager.io", ns, None),
        ("patch", "persistentvolumes", "", None, None),
        # Upstream's hardcoded leader-election ID, in its own namespace.
        ("update", "leases", "coordination.k8s.io", ns, "kura-controller.kura.tuist.dev"),
    ]
    denied = [
        ("list", "secrets", "", None, None),
        ("get", "secrets", "", "kura-failover", None),
        ("create", "statefulsets", "apps", "default", None),
        ("create", "pods", "", ns, None),
        ("patch", "nodes", "", None, None),
        ("create", "persistentvolumeclaims", "", ns, None),
        ("delete", "persistentvolumes", "", None, None),
        ("create", "certificates", "cert-manager.io", ns, None),
        # What upstream's PeerDemuxReconciler would need to write our kura-peer-demux-<region>.
        ("update", "configmaps", "", ns, "kura-peer-demux-ca-east"),
        ("create", "configmaps", "", ns, None),
        ("update", "daemonsets", "apps", ns, "kura-peer-demux-ca-east"),
        ("delete", "daemonsets", "apps", ns, "kura-peer-demux-ca-east"),
        ("create", "kurainstances", "kura.tuist.dev", ns, None),
        ("update", "leases", "coordination.k8s.io", ns, "someone-elses-lease"),
        ("create", "clusterrolebindings", "rbac.authorization.k8s.io", None, None),
    ]
    for verb, resource, group, namespace, name in allowed:
        assert can(kube_cluster, me, verb, resource, group=group, namespace=namespace, name=name), (
            verb,
            resource,
        )
    for verb, resource, group, namespace, name in denied:
        assert not can(kube_cluster, me, verb, resource, group=group, namespace=namespace, name=name), (
            verb,
            resource,
        )
    kube_cluster.delete_namespace(ns)
