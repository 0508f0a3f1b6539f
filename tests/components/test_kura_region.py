"""KuraRegion under Pulumi mocks: the kura-controller settings, the failover watcher and
the region's outputs; one invariant per test, every object schema-checked."""

from __future__ import annotations

import json
import re
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.kura_region import KuraRegion, KuraRegionArgs, available_regions, kura_controller_settings
from config.models import Environment, FailoverIP, Fleet, GatewayMode, Kura, Region
from tests.components.conftest import VENDORS, WATCHER_IMAGE, stack_secrets
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest


def render(
    region: Region, fleet: Fleet, fip: FailoverIP | None, kura: Kura, outputs: dict[str, Any] | None = None
) -> ManifestRecorder:
    sink: dict[str, Any] = outputs if outputs is not None else {}

    def build() -> Any:
        kr = KuraRegion(
            "us-east",
            KuraRegionArgs(
                region=region,
                fleet=fleet,
                failover_ip=fip,
                kura=kura,
                environment=Environment.STAGING,
                public_ipv4s=["198.51.100.1"],
                watcher_image=WATCHER_IMAGE,
                vendors=VENDORS,
                secrets=stack_secrets(),
            ),
        )
        names = [
            "id",
            "cluster_id",
            "host",
            "peer_host",
            "failover_ip",
            "node_pool",
            "exposed",
            "gateway_mode",
        ]
        return pulumi.Output.all(*(getattr(kr, n) for n in names)).apply(
            lambda values: sink.update(zip(names, values, strict=True))
        )

    return collect_manifests(build)


def settings(region: Region, fleet: Fleet, kura: Kura) -> dict[str, str]:
    return kura_controller_settings(region, fleet, kura, Environment.STAGING)


def test_discovery_is_the_account_peer_service_and_there_is_no_global_name(
    region: Region, fleet: Fleet, kura: Kura
) -> None:
    s = settings(region, fleet, kura)
    assert s["KURA_DISCOVERY_DNS_NAME"] == "kura-{account}-peer.kura.svc.cluster.local"
    assert [k for k in s if "GLOBAL" in k] == []


def test_bootstrap_budget_and_concurrency_from_seed_001(region: Region, fleet: Fleet, kura: Kura) -> None:
    s = settings(region, fleet, kura)
    assert (
        s["KURA_TMP_DIR_MAX_BYTES"],
        s["KURA_BOOTSTRAP_MAX_CONCURRENT_PEERS"],
        s["KURA_BOOTSTRAP_ARTIFACT_CONCURRENCY"],
    ) == (str(8 * 1024**3), "4", "16")


def test_runtime_image_is_explicit_image_and_tag(region: Region, fleet: Fleet, kura: Kura) -> None:
    assert settings(region, fleet, kura)["KURA_RUNTIME_IMAGE"] == "ghcr.io/tuist/kura:0.10.5"


def test_replicas_and_storage(region: Region, fleet: Fleet, kura: Kura) -> None:
    s = settings(region, fleet, kura)
    assert (s["KURA_REPLICAS"], s["KURA_STORAGE_CLASS"], s["KURA_STORAGE_SIZE"]) == (
        "2",
        "scw-local-nvme",
        "50Gi",
    )


def test_egress_floor_is_a_resource_request_and_burst_an_annotation(
    region: Region, fleet: Fleet, kura: Kura
) -> None:
    s = settings(region, fleet, kura)
    assert json.loads(s["KURA_POD_RESOURCE_REQUESTS"]) == {"tuist.dev/egress-mbps": "25"}
    assert json.loads(s["KURA_POD_ANNOTATIONS"]) == {"kubernetes.io/egress-bandwidth": "1500M"}


def test_pool_selector_and_a_toleration_per_fleet_taint(region: Region, fleet: Fleet, kura: Kura) -> None:
    s = settings(region, fleet, kura)
    assert json.loads(s["KURA_NODE_SELECTOR"]) == {"node.cluster.x-k8s.io/pool": "kura-us-east"}
    assert json.loads(s["KURA_TOLERATIONS"]) == [
        {"key": "tuist.dev/kura", "operator": "Equal", "effect": "NoSchedule", "value": "true"},
        {"key": "tuist.dev/bare-metal", "operator": "Exists", "effect": "NoExecute"},
    ]


def test_peer_plane_settings_match_the_demux_routes(region: Region, fleet: Fleet, kura: Kura) -> None:
    s = settings(region, fleet, kura)
    assert s["KURA_PUBLIC_PEER_HOST"] == "peer.{account}-us-east-1-staging.kura.tuist.dev"
    assert s["KURA_PUBLIC_PEER_SERVICE"] == "kura-{account}-us-east-peer"
    assert (s["KURA_MESH_PEER_HOST_NETWORK"], s["KURA_PEER_PORT"]) == ("true", "7443")


def test_exposure_needs_config_and_a_fleet_that_can_hold_a_box(region: Region, fleet: Fleet) -> None:
    hidden = region.model_copy(update={"id": "ca-east", "exposed": False})
    parked = region.model_copy(update={"id": "eu-central"})
    pairs = [(region, fleet), (hidden, fleet), (parked, fleet.model_copy(update={"enabled": False}))]
    assert available_regions(pairs) == "us-east"


def test_settings_configmap_is_per_region(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura
) -> None:
    cm = render(region, fleet, failover_ip, kura).find("ConfigMap", "kura-controller-us-east")
    assert cm["metadata"]["namespace"] == "kura"
    assert cm["data"] == settings(region, fleet, kura)


def test_outputs_describe_the_region(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura
) -> None:
    outputs: dict[str, Any] = {}
    render(region, fleet, failover_ip, kura, outputs)
    assert outputs == {
        "id": "us-east",
        "cluster_id": "us-east-1",
        "host": "us-east.staging.kura.tuist.dev",
        "peer_host": "peer.us-east.staging.kura.tuist.dev",
        "failover_ip": "203.0.113.7",
        "node_pool": "kura-us-east",
        "exposed": True,
        "gateway_mode": "host_network",
    }


def test_parked_failover_ip_gives_no_watcher_and_no_address(
    region: Region, fleet: Fleet, parked_ip: FailoverIP, kura: Kura
) -> None:
    outputs: dict[str, Any] = {}
    recorded = render(region, fleet, parked_ip, kura, outputs)
    assert [d["metadata"]["name"] for d in recorded.of_kind("Deployment")] == ["kura-gateway-us-east"]
    assert outputs["failover_ip"] is None


def test_routed_failover_ip_runs_a_watcher_for_that_ip(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura
) -> None:
    deployment = render(region, fleet, failover_ip, kura).find("Deployment", "kura-failover-watcher-us-east")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", "watcher"]
    assert {e["name"]: e["value"] for e in container["env"]} == {
        "FAILOVER_IP": "203.0.113.7",
        "FAILOVER_VENDOR": "ovh",
        "REGION": "us-east",
        "NODE_POOL": "kura-us-east",
        "KURA_NAMESPACE": "kura",
        "POLL_SECONDS": "30",
        "CONFIRM_POLLS": "2",
        # Non-secret account settings only; the secrets come as files from the Secret.
        "FAILOVER_VENDOR_ACCOUNT": '{"endpoint":"ovh-us","application_key":"tuist-us-app"}',
        "FAILOVER_CREDENTIALS_DIR": "/etc/tuist-failover",
    }
    assert (deployment["spec"]["replicas"], deployment["spec"]["strategy"]) == (1, {"type": "Recreate"})


def test_watcher_rbac_is_nodes_read_and_pods_list_only(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura
) -> None:
    recorded = render(region, fleet, failover_ip, kura)
    assert recorded.find("ClusterRole", "kura-failover-watcher-us-east")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}
    ]
    role = recorded.find("Role", "kura-failover-watcher-us-east")
    assert (role["metadata"]["namespace"], role["rules"]) == (
        "kura",
        [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
    )


def test_region_with_the_wrong_fleet_is_refused(region: Region, fleet: Fleet, kura: Kura) -> None:
    other = fleet.model_copy(update={"name": "dedibox-eu"})
    with pytest.raises(
        ValueError,
        match=re.escape("regions['us-east'].fleet is 'ovh-us-east' but fleet 'dedibox-eu' was passed"),
    ):
        render(region, other, None, kura)


def test_routed_ip_without_a_watcher_image_is_refused(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura
) -> None:
    args = KuraRegionArgs(
        region=region, fleet=fleet, failover_ip=failover_ip, kura=kura, environment=Environment.STAGING
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "regions['us-east']: failover IP 'us-east-peer' is routed but no watcher_image was given "
            "to run its failover watcher"
        ),
    ):
        collect_manifests(lambda: KuraRegion("us-east", args))


@pytest.mark.parametrize("mode", list(GatewayMode))
def test_every_region_object_is_schema_valid(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura, mode: GatewayMode
) -> None:
    recorded = render(region.model_copy(update={"gateway": mode}), fleet, failover_ip, kura)
    kinds = sorted({m["kind"] for m in recorded.manifests})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "DNSEndpoint",
        "DaemonSet",
        "Deployment",
        "IngressClass",
        "Role",
        "RoleBinding",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    for manifest in recorded.manifests:
        validate_manifest(manifest)


def test_component_tree(region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura) -> None:
    recorded = render(region, fleet, failover_ip, kura)
    assert sorted(t for t, _ in recorded.components) == [
        "tuist:dns:DnsRecords",
        "tuist:failover_watcher:FailoverWatcher",
        "tuist:gateway:Gateway",
        "tuist:kura_region:KuraRegion",
        "tuist:peer_demux:PeerDemux",
    ]


def test_every_kubernetes_object_uses_the_callers_provider(
    region: Region, fleet: Fleet, failover_ip: FailoverIP, kura: Kura
) -> None:
    def build() -> None:
        cluster = k8s.Provider("cluster", render_yaml_to_directory="/nonexistent-render-dir")
        KuraRegion(
            "us-east",
            KuraRegionArgs(
                region=region,
                fleet=fleet,
                failover_ip=failover_ip,
                kura=kura,
                environment=Environment.STAGING,
                watcher_image=WATCHER_IMAGE,
                vendors=VENDORS,
                secrets=stack_secrets(),
            ),
            pulumi.ResourceOptions(providers=[cluster]),
        )

    recorded = collect_manifests(build)
    assert len(recorded.providers) == len(recorded.manifests)
    assert {(p or "").rsplit("::", 1)[0].rsplit("$", 1)[-1] for p in recorded.providers.values()} == {
        "pulumi:providers:kubernetes::cluster"
    }
