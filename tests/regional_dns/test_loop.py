"""The public DNS reconciler against the real control plane (tests/support/cluster.py), as its own
ServiceAccount with the RBAC the program renders (components/dns_reconciler.py).

Three boxes of the region's pool join as kubelet stand-ins, one of them with a private InternalIP, and
a fourth box of another pool; each runs a gateway pod carrying the labels of the region's gateway
Deployment (rendered by components/gateway.py, applied paused so that no ReplicaSet adopts these
pods). The tests fail a pod's readiness probe, cordon a box, hold a pod terminating, take the
reconciler's rights or the gateway Deployment away, and read back the DNSEndpoint it wrote.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client as k8s

from components.dns import DnsRecords, DnsRecordsArgs, regional_dns_name
from components.dns_reconciler import (
    DnsReconciler,
    DnsReconcilerArgs,
    dns_reconciler_name,
    reconciler_settings,
)
from components.external_dns import DNSENDPOINT_GROUP, dns_namespace
from components.gateway import Gateway, GatewayArgs, gateway_name
from config.models import Fleet, Hardware, Region, Vendor
from regional_dns.reconciler import FIELD_MANAGER, KubeView, Outcome, Pass, RegionalDns
from tests.cluster.k8s_support import apply, can, install_crd_fixture, rendered, sa, service_account_api
from tests.support.cluster import KubeCluster, Kubelet, Kubelets, next_node_ip, node_ready, wait_until

POOL = "rdns-pool"
FLEET = Fleet(
    name="rdns",
    vendor=Vendor.OVH,
    marker="tuist-kura-staging-rdns",
    size=3,
    node_pool=POOL,
    hardware=Hardware(offer="SYS-1", threads=12, memory_gib=32),
)
# A region id no other test's objects use: its ClusterRole is cluster-wide.
REGION = Region(
    id="xx-loop",
    cluster_id="xx-loop-1",
    fleet="rdns",
    ingress_class="kura-xx-loop",
    egress_burst_mbps=500,
    host="xx-loop.staging.kura.tuist.dev",
    failover_ip=None,
)
IMAGE = "ghcr.io/tuist/tuist-infra-watcher@sha256:" + "a" * 64
A, B, PRIVATE, DECOY = "rdns-a", "rdns-b", "rdns-private", "rdns-decoy"
ENDPOINT = regional_dns_name(REGION.id)


@dataclass
class Pool:
    """The region's boxes and their gateway pods, in the test's Kura namespace."""

    namespace: str
    kubelets: dict[str, Kubelet]
    pods: dict[str, str]  # node -> its gateway pod's name
    labels: dict[str, str]  # the gateway Deployment's pod labels
    gateway: dict[str, Any]  # its manifest, as applied

    @property
    def address(self) -> dict[str, str]:
        return {node: kubelet.node_ip for node, kubelet in self.kubelets.items()}


def gateway_pod(name: str, node: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "hostNetwork": True,
            "containers": [
                {
                    "name": "controller",
                    "image": "registry.k8s.io/ingress-nginx/controller:v1.13.3",
                    "readinessProbe": {"tcpSocket": {"port": 443}, "periodSeconds": 1, "failureThreshold": 1},
                }
            ],
        },
    }


def pod_ready(cluster: KubeCluster, namespace: str, name: str) -> bool:
    found = cluster.core.read_namespaced_pod(name, namespace)
    return any(c.type == "Ready" and c.status == "True" for c in found.status.conditions or [])


def program(namespace: str) -> list[dict[str, Any]]:
    """The region's DNS objects and its gateway Deployment, as the program renders them."""

    def build() -> None:
        DnsRecords(
            "dns",
            DnsRecordsArgs(region_id=REGION.id, host=REGION.host, namespace=namespace, failover_address=None),
        )
        DnsReconciler(
            "dns-reconciler", DnsReconcilerArgs(region=REGION, fleet=FLEET, namespace=namespace, image=IMAGE)
        )
        Gateway("gateway", GatewayArgs(region=REGION, fleet=FLEET, namespace=namespace, image="gw:1"))

    return rendered(build)


@pytest.fixture(scope="module")
def region(
    kube_cluster: KubeCluster, fleet_rbac: Callable[[str], None], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pool]:
    from providers.kube import BootstrapToken, create_bootstrap_token

    fleet_rbac("rdns")
    install_crd_fixture(kube_cluster, "dnsendpoint.yaml")
    namespace = kube_cluster.namespace("rdns")
    kube_cluster.core.create_namespace(
        k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=dns_namespace(namespace)))
    )
    manifests = program(namespace)
    # Not the reconciler's own Deployment (the test runs the loop) nor the gateway's objects besides
    # its Deployment, which is paused: it makes no ReplicaSet that would adopt the test's pods.
    dns = [m for m in manifests if m["kind"] != "Deployment" and "gateway" not in m["metadata"]["name"]]
    [gateway] = [
        m for m in manifests if m["kind"] == "Deployment" and m["metadata"]["name"] == gateway_name(REGION.id)
    ]
    gateway["spec"]["paused"] = True
    apply(kube_cluster, [*dns, gateway])
    runner = Kubelets(kube_cluster, tmp_path_factory.mktemp("rdns-kubelets"))
    kubelets: dict[str, Kubelet] = {}
    for node, pool, ip in (
        (A, POOL, next_node_ip()),
        (B, POOL, next_node_ip()),
        (PRIVATE, POOL, "10.77.0.3"),
        (DECOY, "rdns-other-pool", next_node_ip()),
    ):
        token = BootstrapToken.generate()
        create_bootstrap_token(kube_cluster.api, token, fleet="rdns", node_name=node)
        kubelets[node] = runner.start(
            node, token.value, node_ip=ip, labels={"node.cluster.x-k8s.io/pool": pool}
        )
    for node in kubelets:
        wait_until(f"node {node} Ready", lambda node=node: node_ready(kube_cluster, node), timeout=90)
    labels = gateway["spec"]["template"]["metadata"]["labels"]
    # Another region's gateway on box A: never this region's.
    other = {**labels, "app.kubernetes.io/instance": "xx-other", "tuist.dev/region": "xx-other"}
    kube_cluster.core.create_namespaced_pod(namespace, gateway_pod("gw-other-region", A, other))
    try:
        yield Pool(namespace, kubelets, {node: f"gw-{node}" for node in kubelets}, labels, gateway)
    finally:
        runner.stop_all()
        for node in kubelets:
            with contextlib.suppress(k8s.ApiException):
                kube_cluster.core.delete_node(node)
        for kind in ("clusterrolebinding", "clusterrole"):
            kube_cluster.kubectl(
                "delete", kind, dns_reconciler_name(REGION.id), "--ignore-not-found", check=False
            )
        kube_cluster.delete_namespace(dns_namespace(namespace))
        kube_cluster.delete_namespace(namespace)


@pytest.fixture
def healthy(kube_cluster: KubeCluster, region: Pool) -> Pool:
    """Every box uncordoned, the gateway Deployment there, every gateway pod Ready, as each test starts."""
    ns = region.namespace
    apps = k8s.AppsV1Api(kube_cluster.api)
    try:
        apps.read_namespaced_deployment(gateway_name(REGION.id), ns)
    except k8s.ApiException as error:
        if error.status != 404:
            raise
        apply(kube_cluster, [region.gateway])
    for node, name in region.pods.items():
        kube_cluster.core.patch_node(node, {"spec": {"unschedulable": False}})
        try:
            pod = kube_cluster.core.read_namespaced_pod(name, ns)
        except k8s.ApiException as error:
            if error.status != 404:
                raise
            pod = kube_cluster.core.create_namespaced_pod(ns, gateway_pod(name, node, region.labels))
        region.kubelets[node].set_ready(pod, "controller", True)
    for name in region.pods.values():
        wait_until(f"{name} Ready", lambda name=name: pod_ready(kube_cluster, ns, name))
    return region


def reconciler(cluster: KubeCluster, region: Pool, api: k8s.ApiClient | None = None) -> RegionalDns:
    """The loop as it runs in its pod: its own identity (unless told), the component's settings."""
    api = api or service_account_api(cluster, dns_namespace(region.namespace), dns_reconciler_name(REGION.id))
    settings = reconciler_settings(REGION, FLEET, region.namespace)
    view = KubeView(settings, k8s.CoreV1Api(api), k8s.AppsV1Api(api), k8s.CustomObjectsApi(api))
    return RegionalDns(settings, view)


def stored(cluster: KubeCluster, region: Pool) -> dict[str, Any]:
    return k8s.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
        DNSENDPOINT_GROUP, "v1alpha1", region.namespace, "dnsendpoints", ENDPOINT
    )


def wildcard(*targets: str) -> list[dict[str, Any]]:
    return [{"dnsName": f"*.{REGION.host}", "recordType": "A", "recordTTL": 60, "targets": list(targets)}]


def both(region: Pool) -> list[dict[str, Any]]:
    """The two publishable boxes of the pool, in address order."""
    return wildcard(
        *sorted((region.address[A], region.address[B]), key=lambda a: tuple(map(int, a.split("."))))
    )


def make_unready(cluster: KubeCluster, region: Pool, node: str) -> None:
    name = region.pods[node]
    region.kubelets[node].set_ready(
        cluster.core.read_namespaced_pod(name, region.namespace), "controller", False
    )
    wait_until(f"{name} NotReady", lambda: not pod_ready(cluster, region.namespace, name))


def test_the_wildcard_is_the_pools_ready_gateways_with_public_addresses(
    kube_cluster: KubeCluster, healthy: Pool
) -> None:
    # The private box's gateway is Ready, the decoy box is of another pool, and the other region's
    # gateway pod on box A is not this region's: none of them adds an address.
    running = reconciler(kube_cluster, healthy)
    assert running.reconcile_once() == Pass(Outcome.WRITTEN, both(healthy))
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": both(healthy)}
    assert running.reconcile_once() == Pass(Outcome.UNCHANGED, both(healthy))


def test_an_unready_gateway_leaves_its_box_out(kube_cluster: KubeCluster, healthy: Pool) -> None:
    make_unready(kube_cluster, healthy, A)
    reconciler(kube_cluster, healthy).reconcile_once()
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": wildcard(healthy.address[B])}


def test_a_cordoned_box_is_left_out(kube_cluster: KubeCluster, healthy: Pool) -> None:
    kube_cluster.core.patch_node(B, {"spec": {"unschedulable": True}})
    reconciler(kube_cluster, healthy).reconcile_once()
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": wildcard(healthy.address[A])}


def test_a_terminating_gateway_pod_leaves_its_box_out(kube_cluster: KubeCluster, healthy: Pool) -> None:
    ns, name = healthy.namespace, healthy.pods[A]
    kube_cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": ["tuist.dev/test-hold"]}})
    kube_cluster.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    try:
        reconciler(kube_cluster, healthy).reconcile_once()
        assert stored(kube_cluster, healthy)["spec"] == {"endpoints": wildcard(healthy.address[B])}
    finally:
        kube_cluster.core.patch_namespaced_pod(name, ns, {"metadata": {"finalizers": None}})
        wait_until(
            f"{name} gone",
            lambda: name not in {p.metadata.name for p in kube_cluster.core.list_namespaced_pod(ns).items},
        )


def test_no_healthy_gateway_withdraws_the_wildcard(kube_cluster: KubeCluster, healthy: Pool) -> None:
    running = reconciler(kube_cluster, healthy)
    running.reconcile_once()
    make_unready(kube_cluster, healthy, A)
    kube_cluster.core.patch_node(B, {"spec": {"unschedulable": True}})
    assert running.reconcile_once() == Pass(Outcome.WRITTEN, [])
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": []}


def test_a_failed_read_keeps_the_records(kube_cluster: KubeCluster, healthy: Pool) -> None:
    reconciler(kube_cluster, healthy).reconcile_once()
    make_unready(kube_cluster, healthy, A)
    # An identity that may read nothing: the apiserver says 403, and the records stay.
    ns = healthy.namespace
    kube_cluster.core.create_namespaced_service_account(ns, {"metadata": {"name": "nobody"}})
    nobody = service_account_api(kube_cluster, ns, "nobody")
    assert reconciler(kube_cluster, healthy, api=nobody).reconcile_once() == Pass(Outcome.KEPT, None)
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": both(healthy)}
    # The gateway Deployment gone (a region being rebuilt, a rename): a failed read too.
    k8s.AppsV1Api(kube_cluster.api).delete_namespaced_deployment(gateway_name(REGION.id), ns)
    wait_until(
        "the gateway Deployment gone",
        lambda: not k8s.AppsV1Api(kube_cluster.api).list_namespaced_deployment(ns).items,
    )
    assert reconciler(kube_cluster, healthy).reconcile_once() == Pass(Outcome.KEPT, None)
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": both(healthy)}


def test_the_records_become_the_reconcilers_and_the_programs_next_apply_leaves_them(
    kube_cluster: KubeCluster, healthy: Pool
) -> None:
    # A stack deployed before the reconciler: the program's manager wrote static records.
    k8s.CustomObjectsApi(kube_cluster.api).delete_namespaced_custom_object(
        DNSENDPOINT_GROUP, "v1alpha1", healthy.namespace, "dnsendpoints", ENDPOINT
    )
    old = {
        "apiVersion": f"{DNSENDPOINT_GROUP}/v1alpha1",
        "kind": "DNSEndpoint",
        "metadata": {"name": ENDPOINT, "namespace": healthy.namespace},
        "spec": {"endpoints": wildcard("203.0.113.9")},
    }
    apply(kube_cluster, [old])
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": wildcard("203.0.113.9")}
    reconciler(kube_cluster, healthy).reconcile_once()
    found = stored(kube_cluster, healthy)
    owners = {
        e["manager"]: str(e["fieldsV1"])
        for e in found["metadata"]["managedFields"]
        if e["operation"] == "Apply"
    }
    assert "f:endpoints" in owners[FIELD_MANAGER]
    assert "f:spec" not in owners.get("pulumi-kubernetes", "")
    # The program's next apply carries no spec: the records are left as the reconciler wrote them.
    [now] = [m for m in program(healthy.namespace) if m["kind"] == "DNSEndpoint"]
    apply(kube_cluster, [now])
    assert stored(kube_cluster, healthy)["spec"] == {"endpoints": both(healthy)}


def test_its_identity_may_read_and_apply_this_region_alone(kube_cluster: KubeCluster, region: Pool) -> None:
    ns, me = region.namespace, sa(dns_namespace(region.namespace), dns_reconciler_name(REGION.id))
    group = DNSENDPOINT_GROUP
    assert can(kube_cluster, me, "list", "nodes")
    assert can(kube_cluster, me, "list", "pods", namespace=ns)
    assert can(
        kube_cluster, me, "get", "deployments", namespace=ns, group="apps", name=gateway_name(REGION.id)
    )
    assert can(kube_cluster, me, "patch", "dnsendpoints", namespace=ns, group=group, name=ENDPOINT)
    assert not can(kube_cluster, me, "create", "dnsendpoints", namespace=ns, group=group)
    assert not can(kube_cluster, me, "delete", "dnsendpoints", namespace=ns, group=group, name=ENDPOINT)
    assert not can(
        kube_cluster, me, "patch", "dnsendpoints", namespace=ns, group=group, name="kura-peer-xx-loop-dns"
    )
    assert not can(
        kube_cluster, me, "get", "deployments", namespace=ns, group="apps", name="kura-gateway-other"
    )
    assert not can(kube_cluster, me, "get", "secrets", namespace=ns)
    assert not can(kube_cluster, me, "get", "secrets", namespace=dns_namespace(ns))
    assert not can(kube_cluster, me, "patch", "nodes")
