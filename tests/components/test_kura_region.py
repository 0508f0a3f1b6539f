"""KuraRegion under Pulumi mocks: what a region puts on the cluster, its failover watcher, its local
volumes and its outputs; one invariant per test, every object schema-checked."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.kura_region import KuraRegion, KuraRegionArgs
from config.models import Cluster, Environment, FailoverIP, Fleet, GatewayMode, Kura, NodePorts, Region
from tests.components.conftest import VENDORS, WATCHER_IMAGE, stack_secrets
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest


def region_args(
    region: Region,
    fleet: Fleet,
    fip: FailoverIP | None,
    kura: Kura,
    cluster: Cluster,
    node_names: Sequence[str] = ("ns1001.ip-203-0-113.net", "ns1002.ip-203-0-113.net"),
) -> KuraRegionArgs:
    return KuraRegionArgs(
        region=region,
        fleet=fleet,
        failover_ip=fip,
        kura=kura,
        environment=Environment.STAGING,
        cluster=cluster,
        watcher_image=WATCHER_IMAGE,
        node_names=list(node_names),
        vendors=VENDORS,
        secrets=stack_secrets(),
    )


def render(args: KuraRegionArgs, outputs: dict[str, Any] | None = None) -> ManifestRecorder:
    sink: dict[str, Any] = outputs if outputs is not None else {}

    def build() -> Any:
        kr = KuraRegion("us-east", args)
        names = [
            "id",
            "cluster_id",
            "host",
            "peer_host",
            "failover_ip",
            "node_pool",
            "exposed",
            "gateway_mode",
            "node_ports",
        ]
        return pulumi.Output.all(*(getattr(kr, n) for n in names)).apply(
            lambda values: sink.update(zip(names, values, strict=True))
        )

    return collect_manifests(build)


def test_outputs_describe_the_region(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    outputs: dict[str, Any] = {}
    render(region_args(region, fleet, failover_ip, kura, cluster), outputs)
    assert outputs == {
        "id": "us-east",
        "cluster_id": "us-east-1",
        "host": "us-east.staging.kura.tuist.dev",
        "peer_host": "peer.us-east.staging.kura.tuist.dev",
        "failover_ip": "203.0.113.7",
        "node_pool": "kura-us-east",
        "exposed": True,
        "gateway_mode": "host_network",
        "node_ports": None,
    }


def test_no_settings_configmap_that_nothing_reads(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    # The region's kura-controller settings are the controller Deployment's env now.
    recorded = render(region_args(region, fleet, failover_ip, kura, cluster))
    names = sorted(m["metadata"]["name"] for m in recorded.of_kind("ConfigMap"))
    assert names == ["kura-gateway-us-east", "kura-peer-demux-routes-us-east", "kura-peer-demux-us-east"]


def test_parked_failover_ip_gives_no_watcher_and_no_address(
    region: Region, fleet: Fleet, parked_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    outputs: dict[str, Any] = {}
    recorded = render(region_args(region, fleet, parked_ip, kura, cluster), outputs)
    assert sorted(d["metadata"]["name"] for d in recorded.of_kind("Deployment")) == [
        "kura-gateway-us-east",
        "kura-peer-demux-routes-us-east",
        "kura-regional-dns-us-east",
    ]
    assert outputs["failover_ip"] is None


def test_routed_failover_ip_runs_a_watcher_that_polls_within_the_demux_drain(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    deployment = render(region_args(region, fleet, failover_ip, kura, cluster)).find(
        "Deployment", "kura-failover-watcher-us-east"
    )
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "watcher"]
    assert {e["name"]: e.get("value") or e["valueFrom"] for e in container["env"]} == {
        "FAILOVER_IP": "203.0.113.7",
        "FAILOVER_VENDOR": "ovh",
        "REGION": "us-east",
        "NODE_POOL": "kura-us-east",
        "KURA_NAMESPACE": "kura",
        "POLL_SECONDS": "5",
        "CONFIRM_POLLS": "2",
        "HEARTBEAT_FILE": "/run/watcher/heartbeat",
        "LEASE_NAME": "kura-failover-watcher-us-east",
        "LEASE_NAMESPACE": "kura-failover",
        # Non-secret account settings only; the secrets come as files from the Secret.
        "FAILOVER_VENDOR_ACCOUNT": '{"endpoint":"ovh-us","application_key":"tuist-us-app"}',
        "FAILOVER_CREDENTIALS_DIR": "/etc/tuist-failover",
        # Its identity in the region's Lease.
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
    }
    assert (deployment["spec"]["replicas"], deployment["spec"]["strategy"]) == (1, {"type": "Recreate"})


def test_watcher_rbac_is_nodes_read_pods_list_and_its_own_lease(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    recorded = render(region_args(region, fleet, failover_ip, kura, cluster))
    assert recorded.find("ClusterRole", "kura-failover-watcher-us-east")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    role = recorded.find("Role", "kura-failover-watcher-us-east")
    assert (role["metadata"]["namespace"], role["rules"]) == (
        "kura",
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
    )
    lease = recorded.find("Role", "kura-failover-watcher-us-east-lease")
    assert (lease["metadata"]["namespace"], lease["rules"]) == (
        "kura-failover",
        [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": ["kura-failover-watcher-us-east"],
                "verbs": ["get", "update"],
            },
        ],
    )
    binding = recorded.find("RoleBinding", "kura-failover-watcher-us-east-lease")
    assert (binding["roleRef"]["name"], binding["subjects"]) == (
        "kura-failover-watcher-us-east-lease",
        [{"kind": "ServiceAccount", "name": "kura-failover-watcher-us-east", "namespace": "kura-failover"}],
    )


def test_each_box_gets_the_regions_local_volumes(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    recorded = render(region_args(region, fleet, failover_ip, kura, cluster))
    assert sorted(pv["metadata"]["name"] for pv in recorded.of_kind("PersistentVolume")) == [
        f"kura-ns100{box}.ip-203-0-113.net-{i}" for box in (1, 2) for i in range(4)
    ]


def test_a_parked_fleet_gets_nothing_that_needs_its_nodes(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    parked = fleet.model_copy(update={"enabled": False})
    outputs: dict[str, Any] = {}
    recorded = render(region_args(region, parked, failover_ip, kura, cluster, node_names=()), outputs)
    # The ordered IP has no box of the region to be routed to: no peer name points at it (that would
    # blackhole the peer mesh), no watcher alerts over an empty pool, and the output says unrouted.
    assert failover_ip.address is not None
    assert [m["metadata"]["name"] for m in recorded.of_kind("DNSEndpoint")] == ["kura-regional-us-east-dns"]
    deployments = [d["metadata"]["name"] for d in recorded.of_kind("Deployment")]
    assert "kura-failover-watcher-us-east" not in deployments
    assert outputs["failover_ip"] is None
    # The gateway Deployment exists with no replica (the engine waits on nothing), the demux
    # DaemonSet selects the pool and so schedules nothing, and no volume is created.
    assert recorded.find("Deployment", "kura-gateway-us-east")["spec"]["replicas"] == 0
    assert recorded.of_kind("PersistentVolume") == []
    on_the_pool = [
        m["metadata"]["name"]
        for m in recorded.manifests
        if m["kind"] == "Deployment"
        and m["spec"]["replicas"]
        and m["spec"]["template"]["spec"].get("nodeSelector", {}).get("node.cluster.x-k8s.io/pool")
        == "kura-us-east"
    ]
    assert on_the_pool == []


def test_region_with_the_wrong_fleet_is_refused(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    other = fleet.model_copy(update={"name": "dedibox-eu"})
    with pytest.raises(
        ValueError,
        match=re.escape("regions['us-east'].fleet is 'ovh-us-east' but fleet 'dedibox-eu' was passed"),
    ):
        render(region_args(region, other, None, kura, cluster))


@pytest.mark.parametrize("mode", list(GatewayMode))
def test_every_region_object_is_schema_valid(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster, mode: GatewayMode
) -> None:
    node_port = mode is GatewayMode.NODE_PORT
    # A node_port region is private (config requires it): its clients come from client_cidrs.
    update: dict[str, object] = {"gateway": mode}
    if node_port:
        update.update(private=True, client_cidrs=["172.16.0.0/22"])
    recorded = render(region_args(region.model_copy(update=update), fleet, failover_ip, kura, cluster))
    kinds = sorted({m["kind"] for m in recorded.manifests})
    assert kinds == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "Deployment",
            "IngressClass",
            "PersistentVolume",
            "PodDisruptionBudget",  # the gateway's: a drain evicts one at a time
            "Role",
            "RoleBinding",
            "Secret",
            "Service",
            "ServiceAccount",
            # A private region publishes no DNS record; it admits its client networks only.
            *(["NetworkPolicy"] if node_port else ["DNSEndpoint"]),
        ]
    )
    for manifest in recorded.manifests:
        validate_manifest(manifest)


def node_port_region(region: Region, **changes: Any) -> Region:
    """`region` made a private node_port region (the reference's scw-fr-par-runners)."""
    private = {"gateway": GatewayMode.NODE_PORT, "private": True, "client_cidrs": ["172.16.0.0/22"]}
    return region.model_copy(update={**private, "failover_ip": None, **changes})


def test_a_node_port_region_admits_its_client_networks_only_and_publishes_no_record(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    private = node_port_region(region)
    recorded = render(region_args(private, fleet, None, kura, cluster))
    (service,) = [
        m
        for m in recorded.manifests
        if m["kind"] == "Service" and m["metadata"]["name"].startswith("kura-gateway")
    ]
    assert (service["spec"]["type"], service["spec"]["externalTrafficPolicy"]) == ("NodePort", "Local")
    # Pinned, the defaults here: the runners are set up with them (the region's node_ports output).
    assert [(p["name"], p["port"], p["nodePort"]) for p in service["spec"]["ports"]] == [
        ("http", 80, 30080),
        ("https", 443, 30443),
    ]
    (policy,) = [m for m in recorded.manifests if m["kind"] == "NetworkPolicy"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"] == service["spec"]["selector"]
    assert policy["spec"]["ingress"] == [
        {
            "from": [{"ipBlock": {"cidr": "172.16.0.0/22"}}],
            "ports": [{"port": "http", "protocol": "TCP"}, {"port": "https", "protocol": "TCP"}],
        }
    ]
    assert not [m for m in recorded.manifests if m["kind"] == "DNSEndpoint"]
    (deployment,) = [
        m
        for m in recorded.manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"].startswith("kura-gateway")
    ]
    assert not deployment["spec"]["template"]["spec"].get("hostNetwork")


def test_a_node_port_regions_pinned_ports_are_its_services_and_its_output(
    region: Region, fleet: Fleet, kura: Kura, cluster: Cluster
) -> None:
    private = node_port_region(region, node_ports=NodePorts(http=31080, https=31443))
    outputs: dict[str, Any] = {}
    recorded = render(region_args(private, fleet, None, kura, cluster), outputs)
    (service,) = [s for s in recorded.of_kind("Service") if s["metadata"]["name"].startswith("kura-gateway")]
    assert [(p["name"], p["nodePort"]) for p in service["spec"]["ports"]] == [
        ("http", 31080),
        ("https", 31443),
    ]
    assert outputs["node_ports"] == {"http": 31080, "https": 31443}


def test_a_host_network_gateway_asks_for_no_node_port(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    recorded = render(region_args(region, fleet, failover_ip, kura, cluster))
    (service,) = [s for s in recorded.of_kind("Service") if s["metadata"]["name"].startswith("kura-gateway")]
    assert service["spec"]["type"] == "ClusterIP"
    assert all("nodePort" not in p for p in service["spec"]["ports"])


@pytest.mark.parametrize(
    ("mode", "private", "public"),
    [
        (GatewayMode.HOST_NETWORK, False, True),
        # Its clients reach its load balancer, not its boxes.
        (GatewayMode.LOAD_BALANCER, False, False),
        (GatewayMode.NODE_PORT, True, False),
    ],
)
def test_only_a_public_host_network_region_has_a_public_wildcard_and_its_reconciler(
    region: Region,
    fleet: Fleet,
    failover_ip: FailoverIP,
    kura: Kura,
    cluster: Cluster,
    mode: GatewayMode,
    private: bool,
    public: bool,
) -> None:
    update: dict[str, object] = {"gateway": mode, "private": private}
    if mode is GatewayMode.NODE_PORT:
        update["client_cidrs"] = ["172.16.0.0/22"]
    recorded = render(region_args(region.model_copy(update=update), fleet, failover_ip, kura, cluster))
    dns = sorted(m["metadata"]["name"] for m in recorded.of_kind("DNSEndpoint"))
    reconcilers = [
        m["metadata"]["name"]
        for m in recorded.of_kind("Deployment")
        if "regional-dns" in m["metadata"]["name"]
    ]
    peer = [] if private else ["kura-peer-us-east-dns"]
    assert (dns, reconcilers) == (
        (sorted([*peer, "kura-regional-us-east-dns"]), ["kura-regional-dns-us-east"])
        if public
        else (peer, [])
    )


def test_component_tree(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    recorded = render(region_args(region, fleet, failover_ip, kura, cluster))
    assert sorted(t for t, _ in recorded.components) == [
        "tuist:dns:DnsRecords",
        "tuist:dns_reconciler:DnsReconciler",
        "tuist:failover_watcher:FailoverWatcher",
        "tuist:gateway:Gateway",
        "tuist:kura_region:KuraRegion",
        "tuist:peer_demux:PeerDemux",
        "tuist:storage:LocalVolumes",
    ]


def test_every_kubernetes_object_uses_the_callers_provider(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, cluster: Cluster
) -> None:
    def build() -> None:
        provider = k8s.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        KuraRegion(
            "us-east",
            region_args(region, fleet, failover_ip, kura, cluster),
            pulumi.ResourceOptions(providers=[provider]),
        )

    recorded = collect_manifests(build)
    assert len(recorded.providers) == len(recorded.manifests)
    assert {(p or "").rsplit("::", 1)[0].rsplit("$", 1)[-1] for p in recorded.providers.values()} == {
        "pulumi:providers:kubernetes::cluster"
    }
