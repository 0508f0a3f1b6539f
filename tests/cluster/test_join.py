"""A kubelet stand-in joins the real control plane the way a self-joined box's kubelet does."""

from __future__ import annotations

import time
from collections.abc import Callable

from cryptography import x509
from cryptography.x509.oid import NameOID
from kubernetes import client as k8s
from kubernetes.utils import parse_quantity

from tests.support.cluster import KubeCluster, Kubelet, Kubelets, wait_until

GIB = 2**30


def csrs_of(cluster: KubeCluster, username_prefix: str) -> list[k8s.V1CertificateSigningRequest]:
    items = k8s.CertificatesV1Api(cluster.api).list_certificate_signing_request().items
    return [c for c in items if c.spec.username.startswith(username_prefix)]


def test_a_kubelet_joins_through_tls_bootstrap_with_what_it_was_given(
    kube_cluster: KubeCluster, join: Callable[..., Kubelet]
):
    kubelet = join(
        "kura-us-east-1",
        node_ip="198.19.240.7",
        labels={"node.cluster.x-k8s.io/pool": "kura-us-east", "node.cluster.x-k8s.io/instance-type": "ovh"},
        taints=["tuist.dev/kura=true:NoSchedule", "tuist.dev/bare-metal:NoExecute"],
        provider_id="ovh://bhs6/ns5001234.ip-203-0-113.net",
        threads=16,
        memory_bytes=64 * GIB,
    )
    node = kube_cluster.core.read_node("kura-us-east-1")

    assert node.spec.provider_id == "ovh://bhs6/ns5001234.ip-203-0-113.net"
    labels = node.metadata.labels
    assert labels["node.cluster.x-k8s.io/pool"] == "kura-us-east"
    assert labels["node.cluster.x-k8s.io/instance-type"] == "ovh"
    assert labels["kubernetes.io/hostname"] == "kura-us-east-1"
    # (node.kubernetes.io/* taints are the node lifecycle controller's, not the kubelet's.)
    given = [t for t in node.spec.taints if not t.key.startswith("node.kubernetes.io/")]
    assert sorted((t.key, t.value, t.effect) for t in given) == [
        ("tuist.dev/bare-metal", None, "NoExecute"),
        ("tuist.dev/kura", "true", "NoSchedule"),
    ]
    assert [(a.type, a.address) for a in node.status.addresses] == [
        ("InternalIP", "198.19.240.7"),
        ("Hostname", "kura-us-east-1"),
    ]
    # Capacity is the box's hardware; allocatable leaves the default hard eviction threshold.
    assert node.status.capacity["cpu"] == "16" and node.status.capacity["memory"] == "64Gi"
    assert parse_quantity(node.status.allocatable["memory"]) == 64 * GIB - 100 * 2**20
    assert node.status.node_info.kubelet_version == "v1.34.2"

    # The certificate came from a CSR the bootstrap token made, auto-approved and signed.
    (csr,) = [
        c
        for c in csrs_of(kube_cluster, "system:bootstrap:")
        if "system:bootstrappers:tuist-cluster-tests" in c.spec.groups
    ]
    assert csr.spec.signer_name == "kubernetes.io/kube-apiserver-client-kubelet"
    assert [c.type for c in csr.status.conditions] == ["Approved"]
    assert csr.status.conditions[0].reason == "AutoApproved"
    pem = (kubelet.dir / "pki" / "kubelet-client-current.pem").read_bytes()
    cert = x509.load_pem_x509_certificate(pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:kura-us-east-1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"

    lease = k8s.CoordinationV1Api(kube_cluster.api).read_namespaced_lease("kura-us-east-1", "kube-node-lease")
    assert lease.spec.holder_identity == "kura-us-east-1"
    assert lease.metadata.owner_references[0].uid == node.metadata.uid
    first_renewal = lease.spec.renew_time
    wait_until(
        "the node lease to be renewed",
        lambda: (
            k8s.CoordinationV1Api(kube_cluster.api)
            .read_namespaced_lease("kura-us-east-1", "kube-node-lease")
            .spec.renew_time
            > first_renewal
        ),
        timeout=20,
    )


def test_node_restriction_judges_what_the_node_writes(
    kube_cluster: KubeCluster, join: Callable[..., Kubelet]
):
    me = join("restricted-1")
    join("bystander-1")
    as_node = k8s.CoreV1Api(kube_cluster.user_api(me.kubeconfig))

    # Its own labels outside the kubernetes.io namespaces: allowed.
    as_node.patch_node("restricted-1", {"metadata": {"labels": {"example.com/rack": "r1"}}})
    # A role label on itself: NodeRestriction refuses (a node must not steer workloads to itself).
    denied = _status_of(
        lambda: as_node.patch_node(
            "restricted-1", {"metadata": {"labels": {"node-role.kubernetes.io/control-plane": ""}}}
        )
    )
    assert denied == 403
    # Another node: the Node authorizer refuses.
    assert (
        _status_of(
            lambda: as_node.patch_node("bystander-1", {"metadata": {"labels": {"example.com/rack": "r1"}}})
        )
        == 403
    )


def _status_of(call: Callable[[], object]) -> int:
    try:
        call()
    except k8s.ApiException as error:
        return int(error.status)
    return 200


def test_a_restarted_kubelet_keeps_its_certificate_and_its_node(
    kube_cluster: KubeCluster, join: Callable[..., Kubelet], kubelets: Kubelets
):
    first = join("restart-1")
    uid = kube_cluster.core.read_node("restart-1").metadata.uid
    csrs_before = len(csrs_of(kube_cluster, "system:"))
    first.stop()
    again = kubelets.start("restart-1", "aaaaaa.bbbbbbbbbbbbbbbb", node_ip=first.node_ip)  # an unusable token
    wait_until(
        "the restarted kubelet to post status",
        lambda: "Node was previously registered" in again.log,
        timeout=30,
    )
    assert kube_cluster.core.read_node("restart-1").metadata.uid == uid
    assert len(csrs_of(kube_cluster, "system:")) == csrs_before


def test_the_node_goes_not_ready_when_its_kubelet_stops(
    kube_cluster: KubeCluster, join: Callable[..., Kubelet]
):
    kubelet = join("stopping-1")
    kubelet.stop()

    def not_ready() -> bool:
        (ready,) = [
            c for c in kube_cluster.core.read_node("stopping-1").status.conditions if c.type == "Ready"
        ]
        return ready.status == "Unknown" and ready.reason == "NodeStatusUnknown"

    # scripts/cluster.sh runs the node lifecycle controller with a 20s grace period.
    wait_until("the node to be marked NotReady (Unknown)", not_ready, timeout=60)
    taints = {t.key for t in kube_cluster.core.read_node("stopping-1").spec.taints or []}
    assert "node.kubernetes.io/unreachable" in taints


def test_the_kubelet_asks_for_a_serving_certificate_that_nothing_approves(
    kube_cluster: KubeCluster, join: Callable[..., Kubelet]
):
    # Why the self-join leaves serverTLSBootstrap off (providers/ssh/scripts/self-join.sh):
    # kube-controller-manager never approves kubernetes.io/kubelet-serving CSRs, so with it and no
    # approver the kubelet serves no TLS and `kubectl logs` cannot reach it.
    join("serving-1", config={"serverTLSBootstrap": True})

    def serving_csr() -> k8s.V1CertificateSigningRequest | None:
        found = [
            c
            for c in csrs_of(kube_cluster, "system:node:serving-1")
            if c.spec.signer_name == "kubernetes.io/kubelet-serving"
        ]
        return found[0] if found else None

    wait_until("the kubelet-serving CSR", serving_csr, timeout=30)
    # The client CSR of the same kubelet was approved within a second; this one stays Pending.
    time.sleep(5)
    csr = serving_csr()
    assert csr is not None and not (csr.status.conditions or [])
    assert csr.spec.username == "system:node:serving-1"
