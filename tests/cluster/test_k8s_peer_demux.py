"""The demux route reconciler on the real control plane, as its own ServiceAccount: it turns the
account peer Services of the Kura namespace, as kura-controller labels them, into the routes
ConfigMap, follows them as they come, go and are relabelled, never routes a Service that could lead
elsewhere, and its Role lets it do exactly that."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from components.peer_demux import PeerDemux, PeerDemuxArgs, route_settings, routes_name
from config.models import Cluster, Environment, Fleet, Hardware, Kura, Region, Vendor
from demux.reconciler import FIELD_MANAGER, RouteReconciler
from demux.routes import ROUTES_KEY
from tests.cluster.k8s_support import apply, can, rendered, sa, service_account_api, suffix
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
    failover_ip=None,
)
CLUSTER = Cluster(runners_controller_image="ghcr.io/tuist/runners-controller:1.0.0")
IMAGE = "ghcr.io/tuist/tuist-infra-watcher@sha256:" + "a" * 64


@pytest.fixture
def kura(kube_cluster: KubeCluster) -> Iterator[Kura]:
    kura = Kura(namespace=f"kura-{suffix()}", runtime_image_tag="0.10.5", controller_image="kc:1")
    kube_cluster.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=kura.namespace)))
    apply(
        kube_cluster,
        rendered(
            lambda: PeerDemux(
                "demux",
                PeerDemuxArgs(
                    region=REGION,
                    fleet=FLEET,
                    kura=kura,
                    environment=Environment.STAGING,
                    cluster=CLUSTER,
                    reconciler_image=IMAGE,
                ),
            )
        ),
    )
    yield kura
    kube_cluster.delete_namespace(kura.namespace)


def kc_labels(handle: str, region: str = REGION.id) -> dict[str, str]:
    """The labels kura-controller puts on an account's Services (demux/routes.py)."""
    return {
        "app.kubernetes.io/managed-by": "kura-controller",
        "tuist.dev/account": handle,
        "tuist.dev/region": region,
    }


def service(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "ports": [{"name": "peer", "port": 7443}],
            "selector": {"app": name},
            **spec,
        },
    }


@pytest.fixture
def reconciler(kube_cluster: KubeCluster, kura: Kura) -> Iterator[RouteReconciler]:
    """The reconciler as it runs in its pod: its own identity, the component's settings."""
    api = service_account_api(kube_cluster, kura.namespace, routes_name(REGION.id))
    settings = route_settings(REGION, kura, Environment.STAGING, CLUSTER)
    running = RouteReconciler(
        settings, k8s.CoreV1Api(api), routes_name(REGION.id), resync_seconds=5, backoff_seconds=0.5
    )
    stop = threading.Event()
    thread = threading.Thread(target=running.run, args=(stop,), daemon=True)
    thread.start()
    yield running
    stop.set()
    thread.join(timeout=10)


def routes(cluster: KubeCluster, kura: Kura) -> list[str] | None:
    cm = cluster.core.read_namespaced_config_map(routes_name(REGION.id), kura.namespace)
    text = (cm.data or {}).get(ROUTES_KEY)
    if text is None:
        return None
    return [line.split('"')[1].removeprefix("ok:") for line in text.splitlines() if line.startswith('"')]


def routes_become(cluster: KubeCluster, kura: Kura, expected: list[str]) -> None:
    wait_until(f"routes {expected}", lambda: routes(cluster, kura) == expected or None, timeout=30)


def test_account_peer_services_become_routes_and_go_when_they_go(
    kube_cluster: KubeCluster, kura: Kura, reconciler: RouteReconciler
) -> None:
    ns = kura.namespace
    routes_become(kube_cluster, kura, [])
    kube_cluster.core.create_namespaced_service(ns, service("kura-acme-ca-east-peer", kc_labels("acme")))
    routes_become(kube_cluster, kura, ["acme.peer.ca-east.staging.kura.tuist.dev"])
    kube_cluster.core.create_namespaced_service(ns, service("kura-globex-ca-east-peer", kc_labels("globex")))
    routes_become(
        kube_cluster,
        kura,
        ["acme.peer.ca-east.staging.kura.tuist.dev", "globex.peer.ca-east.staging.kura.tuist.dev"],
    )
    kube_cluster.core.delete_namespaced_service("kura-acme-ca-east-peer", ns)
    routes_become(kube_cluster, kura, ["globex.peer.ca-east.staging.kura.tuist.dev"])
    cm = kube_cluster.core.read_namespaced_config_map(routes_name(REGION.id), ns)
    backend = cm.data[ROUTES_KEY].splitlines()[-1].split()[-1]
    assert backend == f"kura-globex-ca-east-peer.{ns}.svc.cluster.local:7443;"


def test_the_labels_decide_and_a_relabelled_service_leaves_the_routes(
    kube_cluster: KubeCluster, kura: Kura, reconciler: RouteReconciler
) -> None:
    ns = kura.namespace
    # Named as account acme's peer Service of ca-east, labelled as account acme-ca's of a region "east".
    kube_cluster.core.create_namespaced_service(
        ns, service("kura-acme-ca-east-peer", kc_labels("acme-ca", "east"))
    )
    # Named as a peer Service, not labelled by kura-controller at all.
    kube_cluster.core.create_namespaced_service(ns, service("kura-initech-ca-east-peer", {}))
    # No region label, as the kura-controller version read sets none on the peer Service: its name
    # for account globex places it in ca-east.
    unregioned = {k: v for k, v in kc_labels("globex").items() if k != "tuist.dev/region"}
    kube_cluster.core.create_namespaced_service(ns, service("kura-globex-ca-east-peer", unregioned))
    routes_become(kube_cluster, kura, ["globex.peer.ca-east.staging.kura.tuist.dev"])
    # Relabelled for another region: the watch delivers the change and the route goes.
    kube_cluster.core.patch_namespaced_service(
        "kura-globex-ca-east-peer", ns, {"metadata": {"labels": {"tuist.dev/region": "us-east"}}}
    )
    routes_become(kube_cluster, kura, [])
    kube_cluster.core.patch_namespaced_service(
        "kura-acme-ca-east-peer", ns, {"metadata": {"labels": kc_labels("acme")}}
    )
    routes_become(kube_cluster, kura, ["acme.peer.ca-east.staging.kura.tuist.dev"])


def test_services_that_could_lead_elsewhere_never_become_routes(
    kube_cluster: KubeCluster, kura: Kura, reconciler: RouteReconciler
) -> None:
    ns = kura.namespace
    kube_cluster.core.create_namespaced_service(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kura-evil-ca-east-peer", "labels": kc_labels("evil")},
            "spec": {"type": "ExternalName", "externalName": "attacker.example.com"},
        },
    )
    kube_cluster.core.create_namespaced_service(
        ns, service("kura-headless-ca-east-peer", kc_labels("headless"), clusterIP="None")
    )
    kube_cluster.core.create_namespaced_service(
        ns, service("kura-noport-ca-east-peer", kc_labels("noport"), ports=[{"name": "http", "port": 80}])
    )
    other = f"other{suffix()}"
    kube_cluster.core.create_namespaced_service(
        "default", service(f"kura-{other}-ca-east-peer", kc_labels(other))
    )
    kube_cluster.core.create_namespaced_service(ns, service("kura-acme-ca-east-peer", kc_labels("acme")))
    routes_become(kube_cluster, kura, ["acme.peer.ca-east.staging.kura.tuist.dev"])


def test_the_routes_data_belongs_to_the_reconciler_not_to_pulumi(
    kube_cluster: KubeCluster, kura: Kura, reconciler: RouteReconciler
) -> None:
    routes_become(kube_cluster, kura, [])
    cm = kube_cluster.core.read_namespaced_config_map(routes_name(REGION.id), kura.namespace)
    owners = {
        entry.manager: entry.fields_v1
        for entry in cm.metadata.managed_fields or []
        if entry.operation == "Apply"
    }
    assert "f:routes.map" in str(owners[FIELD_MANAGER])
    assert "f:data" not in str(owners.get("pulumi-kubernetes", {}))


def test_the_reconciler_s_role_is_services_read_and_its_own_configmap(
    kube_cluster: KubeCluster, kura: Kura
) -> None:
    ns, me = kura.namespace, sa(kura.namespace, routes_name(REGION.id))
    assert can(kube_cluster, me, "watch", "services", namespace=ns)
    assert can(kube_cluster, me, "patch", "configmaps", namespace=ns, name=routes_name(REGION.id))
    assert not can(kube_cluster, me, "list", "services", namespace="default")
    assert not can(kube_cluster, me, "patch", "configmaps", namespace=ns, name="kura-peer-demux-ca-east")
    assert not can(kube_cluster, me, "create", "configmaps", namespace=ns)
    assert not can(kube_cluster, me, "get", "secrets", namespace=ns)
    assert not can(kube_cluster, me, "list", "endpoints", namespace=ns)
