"""Gateway (ingress-nginx per region) under Pulumi mocks; one invariant per test."""

from __future__ import annotations

from typing import Any

import pytest

from components.gateway import (
    GATEWAY_CONNECTION_DRAIN_SECONDS,
    GATEWAY_DNS_SECONDS,
    GATEWAY_DRAIN_SECONDS,
    GATEWAY_MIN_READY_SECONDS,
    Gateway,
    GatewayArgs,
)
from config.models import Fleet, GatewayMode, Kura, Region
from regional_dns.reconciler import Settings as RegionalDnsSettings
from regional_dns.records import DNS_TTL
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

NAME = "kura-gateway-us-east"
# The selector of the Deployment and of the PodDisruptionBudget: immutable on the Deployment.
LABELS = {
    "app.kubernetes.io/name": "kura-gateway",
    "app.kubernetes.io/component": "gateway",
    "app.kubernetes.io/instance": "us-east",
    "app.kubernetes.io/managed-by": "tuist-infra",
    "tuist.dev/region": "us-east",
}
SHARED = {
    "use-forwarded-headers": "true",
    "compute-full-forwarded-for": "true",
    "upstream-keepalive-timeout": "10",
    "allow-snippet-annotations": "false",
    "enable-real-ip": "true",
    "proxy-real-ip-cidr": "0.0.0.0/0",
    "proxy-body-size": "0",
    "proxy-request-buffering": "off",
    "proxy-buffering": "off",
    "proxy-max-temp-file-size": "0",
    "keep-alive-requests": "10000",
    "upstream-keepalive-requests": "10000",
    "client-body-buffer-size": "4m",
    "http2-max-concurrent-streams": "32",
    "http-snippet": "http2_body_preread_size 4m;",
}


IMAGE = Kura(runtime_image_tag="0.10.5", controller_image="kc:1").gateway_image


def render(region: Region, fleet: Fleet, **timings: int) -> ManifestRecorder:
    return collect_manifests(
        lambda: Gateway(
            "gw", GatewayArgs(region=region, fleet=fleet, namespace="kura", image=IMAGE, **timings)
        )
    )


def lb(region: Region) -> Region:
    return region.model_copy(update={"gateway": GatewayMode.LOAD_BALANCER})


def pod_spec(recorded: ManifestRecorder) -> dict[str, Any]:
    spec: dict[str, Any] = recorded.find("Deployment", NAME)["spec"]["template"]["spec"]
    return spec


def test_hostnetwork_configmap_has_exactly_the_anchor_keys_without_proxy_protocol(
    region: Region, fleet: Fleet
) -> None:
    assert render(region, fleet).find("ConfigMap", NAME)["data"] == {**SHARED, "use-proxy-protocol": "false"}


def test_load_balancer_configmap_turns_proxy_protocol_on(region: Region, fleet: Fleet) -> None:
    assert render(lb(region), fleet).find("ConfigMap", NAME)["data"] == {
        **SHARED,
        "use-proxy-protocol": "true",
    }


def test_hostnetwork_service_is_clusterip(region: Region, fleet: Fleet) -> None:
    spec = render(region, fleet).find("Service", NAME)["spec"]
    assert spec["type"] == "ClusterIP"
    assert "externalTrafficPolicy" not in spec
    assert [(p["name"], p["port"]) for p in spec["ports"]] == [("http", 80), ("https", 443)]


def test_load_balancer_service_keeps_client_ips_local(region: Region, fleet: Fleet) -> None:
    spec = render(lb(region), fleet).find("Service", NAME)["spec"]
    assert (spec["type"], spec["externalTrafficPolicy"]) == ("LoadBalancer", "Local")


def test_hostnetwork_args_report_node_internal_ip(region: Region, fleet: Fleet) -> None:
    [container] = pod_spec(render(region, fleet))["containers"]
    assert container["args"] == [
        "/nginx-ingress-controller",
        "--election-id=kura-gateway-us-east-leader",
        "--controller-class=k8s.io/kura-us-east",
        "--ingress-class=kura-us-east",
        "--configmap=$(POD_NAMESPACE)/kura-gateway-us-east",
        "--watch-namespace=$(POD_NAMESPACE)",
        "--report-node-internal-ip-address=true",
        # /healthz and /metrics (every customer host a series) on loopback, not the public address.
        "--healthz-host=127.0.0.1",
    ]


def test_a_private_regions_gateway_keeps_its_health_port_on_the_pod(region: Region, fleet: Fleet) -> None:
    # Off the host's network the pod has its own address, which the kubelet probes.
    node_port = region.model_copy(
        update={"gateway": GatewayMode.NODE_PORT, "private": True, "client_cidrs": ["172.16.0.0/22"]}
    )
    [c] = pod_spec(render(node_port, fleet))["containers"]
    assert not any(a.startswith("--healthz-host") for a in c["args"])
    assert c["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}


def test_load_balancer_args_publish_the_service(region: Region, fleet: Fleet) -> None:
    [container] = pod_spec(render(lb(region), fleet))["containers"]
    assert container["args"][-1] == "--publish-service=kura/kura-gateway-us-east"
    assert "--report-node-internal-ip-address=true" not in container["args"]


def test_hostnetwork_pod_uses_host_dns_policy_on_the_pool(region: Region, fleet: Fleet) -> None:
    spec = pod_spec(render(region, fleet))
    assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert spec["nodeSelector"] == {"node.cluster.x-k8s.io/pool": "kura-us-east"}
    assert [t["key"] for t in spec["tolerations"]] == ["tuist.dev/kura", "tuist.dev/bare-metal"]


def test_hostnetwork_gateway_is_one_per_box_and_never_surges(region: Region, fleet: Fleet) -> None:
    deployment = render(region, fleet).find("Deployment", NAME)["spec"]
    assert deployment["replicas"] == 2
    assert deployment["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    [term] = deployment["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"


def test_the_deployment_selector_never_changes(region: Region, fleet: Fleet) -> None:
    # spec.selector is immutable: a changed one would replace the Deployment on the next up.
    deployment = render(region, fleet).find("Deployment", NAME)["spec"]
    assert deployment["selector"] == {"matchLabels": LABELS}
    assert deployment["template"]["metadata"]["labels"] == LABELS


def test_the_drain_outlasts_a_dns_pass_the_publish_and_the_ttl() -> None:
    # regional_dns reads the cluster every 30 s and drops a terminating gateway at its next pass;
    # external-dns publishes at once (`--events`); resolvers keep the old answer for the TTL, 60 s.
    assert (RegionalDnsSettings.refresh_seconds, DNS_TTL) == (30.0, 60)
    assert GATEWAY_DRAIN_SECONDS == GATEWAY_MIN_READY_SECONDS == GATEWAY_DNS_SECONDS == 30 + 30 + 60
    assert RegionalDnsSettings.refresh_seconds + DNS_TTL <= GATEWAY_DRAIN_SECONDS


@pytest.mark.parametrize("mode", list(GatewayMode))
def test_a_stopping_gateway_serves_until_the_wildcard_has_left_its_box(
    region: Region, fleet: Fleet, mode: GatewayMode
) -> None:
    spec = render(region.model_copy(update={"gateway": mode}), fleet).find("Deployment", NAME)["spec"]
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    # ingress-nginx stops accepting at SIGTERM (--shutdown-grace-period 0): the kubelet sends it only
    # after the preStop sleep, then nginx drains open requests (worker-shutdown-timeout 240 s).
    assert container["lifecycle"] == {"preStop": {"sleep": {"seconds": 120}}}
    assert pod["terminationGracePeriodSeconds"] == 120 + 300
    assert GATEWAY_DRAIN_SECONDS + GATEWAY_CONNECTION_DRAIN_SECONDS == 420
    assert not any(a.startswith("--shutdown-grace-period") for a in container["args"])
    # The next box's gateway goes only once the new one has been Ready a DNS pass and a TTL.
    assert spec["minReadySeconds"] == 120


def test_dev_shortens_the_drain_and_the_wait_as_its_config_says(region: Region, fleet: Fleet) -> None:
    # kura.gateway_drain_seconds / gateway_min_ready_seconds: dev's DNS is in memory.
    spec = render(region, fleet, drain_seconds=1, min_ready_seconds=1).find("Deployment", NAME)["spec"]
    pod = spec["template"]["spec"]
    assert pod["containers"][0]["lifecycle"] == {"preStop": {"sleep": {"seconds": 1}}}
    assert (pod["terminationGracePeriodSeconds"], spec["minReadySeconds"]) == (1 + 300, 1)


def test_a_drain_evicts_one_gateway_at_a_time(region: Region, fleet: Fleet) -> None:
    pdb = render(region, fleet).find("PodDisruptionBudget", NAME)
    assert pdb["apiVersion"] == "policy/v1"
    assert (pdb["metadata"]["namespace"], pdb["metadata"]["labels"]) == ("kura", LABELS)
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": LABELS},
        # A gateway that is not Ready is out of the wildcard already: it never holds a drain up.
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


@pytest.mark.parametrize(
    ("size", "enabled", "timeout"),
    [
        # Per box: the grace (120 + 300), 60 s to start, minReadySeconds 120; then Pulumi's own 600.
        (2, True, 2 * (420 + 60 + 120) + 600),
        (5, True, 5 * 600 + 600),
        # A parked fleet has no replica to roll: Pulumi's default.
        (2, False, 600),
    ],
)
def test_pulumi_waits_for_the_whole_roll(
    region: Region, fleet: Fleet, size: int, enabled: bool, timeout: int
) -> None:
    sized = fleet.model_copy(update={"size": size, "enabled": enabled})
    deployment = render(region, sized).find("Deployment", NAME)
    assert deployment["metadata"]["annotations"] == {"pulumi.com/timeoutSeconds": str(timeout)}


def test_a_node_port_gateway_prefers_one_per_box(region: Region, fleet: Fleet) -> None:
    # Behind externalTrafficPolicy Local a box without its own controller drops what its node port
    # takes; preferred, not required, so a rollout's surge pod still schedules.
    node_port = region.model_copy(update={"gateway": GatewayMode.NODE_PORT})
    spec = render(node_port, fleet).find("Deployment", NAME)["spec"]["template"]["spec"]
    [term] = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["weight"] == 100
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in spec["affinity"]["podAntiAffinity"]


def test_a_parked_fleet_gets_a_gateway_with_no_replica(region: Region, fleet: Fleet) -> None:
    # Nothing can run without the fleet's boxes, and the engine must not wait for a pod that cannot.
    parked = fleet.model_copy(update={"enabled": False})
    assert render(region, parked).find("Deployment", NAME)["spec"]["replicas"] == 0


def test_image_probes_ports_and_resources_match_the_anchor(region: Region, fleet: Fleet) -> None:
    [c] = pod_spec(render(region, fleet))["containers"]
    probe = {
        # The kubelet probes a hostNetwork pod from the host: its loopback, where the port is bound.
        "httpGet": {"path": "/healthz", "port": "metrics", "host": "127.0.0.1"},
        "initialDelaySeconds": 10,
        "periodSeconds": 10,
        "timeoutSeconds": 1,
    }
    # v1.13.3 carries the CVE-2025-1974 (IngressNightmare) fix (v1.12.1 / v1.11.5 and later).
    assert c["image"] == (
        "registry.k8s.io/ingress-nginx/controller:v1.13.3"
        "@sha256:1b044f6dcac3afbb59e05d98463f1dec6f3d3fb99940bc12ca5d80270358e3bd"
    )
    assert (c["livenessProbe"], c["readinessProbe"]) == (probe, probe)
    assert [(p["name"], p["containerPort"]) for p in c["ports"]] == [
        ("http", 80),
        ("https", 443),
        ("metrics", 10254),
    ]
    assert c["resources"] == {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}


def test_ingress_class_points_at_this_controller(region: Region, fleet: Fleet) -> None:
    ic = render(region, fleet).find("IngressClass", "kura-us-east")
    assert ic["spec"] == {"controller": "k8s.io/kura-us-east"}
    assert "namespace" not in ic["metadata"]


def test_namespaced_rbac_is_least_privilege(region: Region, fleet: Fleet) -> None:
    rules = render(region, fleet).find("Role", NAME)["rules"]
    assert rules == [
        {
            "apiGroups": [""],
            "resources": ["configmaps", "pods", "secrets", "endpoints", "services"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": ["networking.k8s.io"], "resources": ["ingresses/status"], "verbs": ["update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["kura-gateway-us-east-leader"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]


def test_cluster_rbac_is_read_only(region: Region, fleet: Fleet) -> None:
    recorded = render(region, fleet)
    rules = recorded.find("ClusterRole", NAME)["rules"]
    assert {verb for rule in rules for verb in rule["verbs"]} == {"get", "list", "watch"}
    assert sorted(r for rule in rules for r in rule["resources"]) == [
        "endpointslices",
        "ingressclasses",
        "ingresses",
        "namespaces",
        "nodes",
    ]
    binding = recorded.find("ClusterRoleBinding", NAME)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kura-gateway-ingress-nginx-us-east", "namespace": "kura"}
    ]
    assert pod_spec(recorded)["serviceAccountName"] == "kura-gateway-ingress-nginx-us-east"


def test_every_gateway_object_is_schema_valid_in_both_modes(region: Region, fleet: Fleet) -> None:
    for r in (region, lb(region)):
        recorded = render(r, fleet)
        assert sorted(m["kind"] for m in recorded.manifests) == [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "Deployment",
            "IngressClass",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
        for manifest in recorded.manifests:
            validate_manifest(manifest)
