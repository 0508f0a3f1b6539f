"""Gateway (ingress-nginx per region) under Pulumi mocks; one invariant per test."""

from __future__ import annotations

from typing import Any

from components.gateway import Gateway, GatewayArgs
from config.models import Fleet, GatewayMode, Kura, Region
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

NAME = "kura-gateway-us-east"
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


def render(region: Region, fleet: Fleet) -> ManifestRecorder:
    return collect_manifests(
        lambda: Gateway("gw", GatewayArgs(region=region, fleet=fleet, namespace="kura", image=IMAGE))
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
    ]


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
        "httpGet": {"path": "/healthz", "port": "metrics"},
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
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ]
        for manifest in recorded.manifests:
            validate_manifest(manifest)
