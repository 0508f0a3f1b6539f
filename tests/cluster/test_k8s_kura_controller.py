"""kura-controller on the real control plane: its objects are accepted as rendered, a change of one
of the seeds' knobs rolls it (the deployment controller starts a new ReplicaSet whose pods carry the
new value), and its RBAC allows what it does and nothing near it. The KuraInstance CRD it renders is
Established and behaves as the server and the controller need: the server's fields kept, the four
required ones enforced, status only through its subresource, `kubectl get kura`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

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


# --- the KuraInstance CRD -------------------------------------------------------------------------

GROUP, VERSION, PLURAL = "kura.tuist.dev", "v1alpha1", "kurainstances"
REQUIRED = {
    "accountHandle": "acme",
    "tenantID": "acme",
    "region": "ca-east",
    "image": "ghcr.io/tuist/kura:0.10.5",
}


@pytest.fixture
def instances(kube_cluster: KubeCluster, kura: Kura) -> Iterator[str]:
    """The Kura namespace and the KuraInstance CRD as rendered (applied, Established); the
    namespace, and the instances in it, go afterwards. The CRD stays for the session: other tests
    apply it by the same name, and a CRD's deletion takes a while."""
    apply(kube_cluster, manifests(kura), kinds=["Namespace", "CustomResourceDefinition"])
    try:
        yield kura.namespace
    finally:
        kube_cluster.delete_namespace(kura.namespace)


def kura_instance(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "KuraInstance",
        "metadata": {"name": name},
        "spec": spec,
    }


def custom(cluster: KubeCluster) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(cluster.api)


def test_the_crd_is_established_and_an_instance_keeps_the_servers_other_fields(
    kube_cluster: KubeCluster, instances: str
) -> None:
    crd = k8s.ApiextensionsV1Api(kube_cluster.api).read_custom_resource_definition(
        "kurainstances.kura.tuist.dev"
    )
    conditions = {c.type: c.status for c in crd.status.conditions}
    assert (conditions["Established"], conditions["NamesAccepted"]) == ("True", "True")
    assert crd.status.accepted_names.short_names == ["kura"]

    # Fields our schema does not name (the server's) survive: nothing is pruned.
    extras = {
        "publicHost": "acme.ca-east.staging.kura.tuist.dev",
        "replicas": 2,
        "nodeSelector": {"node.cluster.x-k8s.io/pool": "kura-ovh"},
        "meshPeerHostNetwork": True,
    }
    body = kura_instance("acme-ca-east", **REQUIRED, **extras)
    custom(kube_cluster).create_namespaced_custom_object(GROUP, VERSION, instances, PLURAL, body)
    read = custom(kube_cluster).get_namespaced_custom_object(
        GROUP, VERSION, instances, PLURAL, "acme-ca-east"
    )
    assert read["spec"] == {**REQUIRED, **extras}


@pytest.mark.parametrize("field", ["image", "accountHandle"])
def test_an_instance_without_a_required_field_is_refused(
    kube_cluster: KubeCluster, instances: str, field: str
) -> None:
    spec = {k: v for k, v in REQUIRED.items() if k != field}
    with pytest.raises(ApiException) as refused:
        custom(kube_cluster).create_namespaced_custom_object(
            GROUP, VERSION, instances, PLURAL, kura_instance("acme-ca-east", **spec, publicHost="x")
        )
    assert refused.value.status == 422
    answer = json.loads(refused.value.body)
    assert answer["reason"] == "Invalid"
    assert [(c["reason"], c["field"]) for c in answer["details"]["causes"]] == [
        ("FieldValueRequired", f"spec.{field}")
    ]
    # Nor an empty one.
    with pytest.raises(ApiException) as empty:
        custom(kube_cluster).create_namespaced_custom_object(
            GROUP, VERSION, instances, PLURAL, kura_instance("acme-ca-east", **{**REQUIRED, field: ""})
        )
    assert json.loads(empty.value.body)["details"]["causes"][0]["field"] == f"spec.{field}"
    assert (
        custom(kube_cluster).list_namespaced_custom_object(GROUP, VERSION, instances, PLURAL)["items"] == []
    )


def test_status_moves_only_through_its_subresource_and_kubectl_lists_it_by_short_name(
    kube_cluster: KubeCluster, instances: str
) -> None:
    api = custom(kube_cluster)
    name = "acme-ca-east"
    created = api.create_namespaced_custom_object(
        GROUP, VERSION, instances, PLURAL, kura_instance(name, **REQUIRED, replicas=2)
    )
    generation = created["metadata"]["generation"]

    # What kura-controller does: status through the subresource (a spec change riding along is dropped).
    status = {"phase": "Ready", "readyReplicas": 2, "observedGeneration": generation, "primary": "acme-0"}
    sent = {**created, "spec": {**created["spec"], "image": "ghcr.io/tuist/kura:9.9.9"}, "status": status}
    api.replace_namespaced_custom_object_status(GROUP, VERSION, instances, PLURAL, name, sent)
    read = api.get_namespaced_custom_object(GROUP, VERSION, instances, PLURAL, name)
    assert read["status"] == status
    assert read["spec"] == {**REQUIRED, "replicas": 2}
    assert read["metadata"]["generation"] == generation

    # And the other way: status written on the main resource is dropped.
    api.replace_namespaced_custom_object(
        GROUP, VERSION, instances, PLURAL, name, {**read, "status": {"phase": "Failed"}}
    )
    assert api.get_namespaced_custom_object(GROUP, VERSION, instances, PLURAL, name)["status"] == status

    listed = kube_cluster.kubectl(
        "get", "kura", "-n", instances, "--no-headers", "-o", "custom-columns=N:.metadata.name"
    )
    assert listed.stdout.split() == [name]
    table = kube_cluster.kubectl("get", "kura", "-n", instances).stdout.splitlines()
    assert table[0].split() == ["NAME", "REGION", "PHASE", "READY", "AGE"]
    assert table[1].split()[:4] == [name, "ca-east", "Ready", "2"]
