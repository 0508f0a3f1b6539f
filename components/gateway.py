"""Per-region ingress-nginx gateway (anchor 4.3).

hostNetwork (bare metal): the controller binds :80/:443 on the box NIC, so there is no
load balancer to prepend a PROXY header (use-proxy-protocol "false"), the Service is
ClusterIP, and the controller reports the node's InternalIP for external-dns.
load_balancer (legacy cloud VM): a LoadBalancer Service with PROXY protocol on.
node_port (a private region, the reference's `data_plane: :node_port`): a NodePort Service on every
box of the pool, and a NetworkPolicy that admits the region's client_cidrs (its runners' Private
Network) and nothing else to the controller's ports.

A roll or a drain keeps the public plane (as the peer demux keeps the peer plane, components/
peer_demux.py): the region's wildcard follows the boxes whose gateway is Ready and not terminating
(regional_dns), so a stopping gateway keeps serving for kura.gateway_drain_seconds (a preStop sleep; nginx
stops accepting only at SIGTERM, after it), long enough for the reconciler's next pass to drop its box,
external-dns to publish and resolvers' cached answers to expire. A new gateway stays Ready for
minReadySeconds (the same time) before the next box's goes, so the record carries it, and the caches
too, before its neighbour leaves. A PodDisruptionBudget lets a drain evict one gateway at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pulumi

from components import kube as k8s
from components.k8s import (
    child_options,
    metadata,
    pod_field_env,
    pool_node_selector,
    pool_tolerations,
    region_labels,
)
from config.models import GATEWAY_DRAIN_SECONDS, GATEWAY_MIN_READY_SECONDS, Fleet, GatewayMode, Region
from regional_dns.reconciler import Settings as RegionalDnsSettings
from regional_dns.records import DNS_TTL

__all__ = [
    "GATEWAY_CONNECTION_DRAIN_SECONDS",
    "GATEWAY_DRAIN_SECONDS",
    "GATEWAY_MIN_READY_SECONDS",
    "GATEWAY_SERVICE_ACCOUNT",
    "TIMEOUT_ANNOTATION",
    "Gateway",
    "GatewayArgs",
    "controller_args",
    "gateway_name",
    "nginx_settings",
    "roll_timeout_seconds",
]

GATEWAY_SERVICE_ACCOUNT = "kura-gateway-ingress-nginx"
# On a node_port region's gateway objects: the policy pack's bare-metal gateway rule reads it.
DATA_PLANE_LABEL = "tuist.dev/data-plane"
NODE_PORT_DATA_PLANE = "node-port"

# What a gateway pod's end takes to reach the clients of the public wildcard (regional_dns): the
# reconciler's next pass (its refresh period, 30 s), external-dns publishing the changed DNSEndpoint
# (`--events`: at once, at most every 5 s, one Cloudflare write; DNS_PUBLISH_SECONDS covers it and
# the pass's own reads), then a resolver's cached answer expiring (the record's TTL, 60 s).
DNS_PUBLISH_SECONDS = 30
GATEWAY_DNS_SECONDS = math.ceil(RegionalDnsSettings.refresh_seconds) + DNS_PUBLISH_SECONDS + DNS_TTL
# A stopping gateway keeps serving this long (its preStop sleep) before nginx stops accepting, and a
# new one stays Ready this long (the Deployment's minReadySeconds) before the next box's goes: the
# config's defaults and floors outside dev (config.models; tests hold them to GATEWAY_DNS_SECONDS).
# After SIGTERM: `nginx -s quit` lets open requests finish within ingress-nginx's
# worker-shutdown-timeout (240 s), then the controller waits its post-shutdown-grace-period (10 s).
GATEWAY_CONNECTION_DRAIN_SECONDS = 300

# How long `pulumi up` waits for a Deployment or DaemonSet to roll out; pulumi-kubernetes' default is
# 10 minutes, which a one-box-at-a-time roll of a few boxes outlasts.
TIMEOUT_ANNOTATION = "pulumi.com/timeoutSeconds"
PULUMI_DEFAULT_TIMEOUT_SECONDS = 600
# From a box's new pod created to Ready: scheduling once the old pod is gone, an image pull on a box
# that lacks it, init containers, the first readiness probes.
POD_START_SECONDS = 60

# Shared with the platform chart's ingress-nginx values (anchor 4.3); only
# use-proxy-protocol depends on the mode.
_SHARED_SETTINGS: dict[str, str] = {
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


def roll_timeout_seconds(boxes: int, *, grace_seconds: int, min_ready_seconds: int) -> int:
    """A one-box-at-a-time roll at its slowest, with Pulumi's own default on top: each box's old pod
    takes up to its terminationGracePeriodSeconds to go (preStop and drain), the new one
    POD_START_SECONDS to be Ready and minReadySeconds to count as available."""
    per_box = grace_seconds + POD_START_SECONDS + min_ready_seconds
    return boxes * per_box + PULUMI_DEFAULT_TIMEOUT_SECONDS


def gateway_name(region_id: str) -> str:
    return f"kura-gateway-{region_id}"


def nginx_settings(mode: GatewayMode) -> dict[str, str]:
    return {
        **_SHARED_SETTINGS,
        "use-proxy-protocol": "true" if mode is GatewayMode.LOAD_BALANCER else "false",
    }


def controller_class(region: Region) -> str:
    return f"k8s.io/{region.ingress_class}"


def controller_args(region: Region, namespace: str) -> list[str]:
    name = gateway_name(region.id)
    args = [
        "/nginx-ingress-controller",
        f"--election-id={name}-leader",
        f"--controller-class={controller_class(region)}",
        f"--ingress-class={region.ingress_class}",
        f"--configmap=$(POD_NAMESPACE)/{name}",
        "--watch-namespace=$(POD_NAMESPACE)",
    ]
    if region.gateway is GatewayMode.HOST_NETWORK:
        # The ClusterIP is unreachable from outside; publish the box's own address.
        args.append("--report-node-internal-ip-address=true")
        # On the host's network the health port (/healthz and /metrics, whose series name every
        # customer host) would answer on the box's public address: loopback only, where the kubelet
        # probes it (HEALTHZ_HOST).
        args.append(f"--healthz-host={HEALTHZ_HOST}")
    else:
        args.append(f"--publish-service={namespace}/{name}")
    return args


def _cluster_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    # Cluster-scoped reads ingress-nginx makes even with --watch-namespace: IngressClasses
    # are cluster-scoped, Nodes give the address it reports, and its informers start on
    # ingresses/endpointslices/namespaces at cluster scope.
    return [
        k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"]),
        k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["namespaces"], verbs=["get", "list", "watch"]),
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=["networking.k8s.io"],
            resources=["ingresses", "ingressclasses"],
            verbs=["get", "list", "watch"],
        ),
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=["discovery.k8s.io"], resources=["endpointslices"], verbs=["get", "list", "watch"]
        ),
    ]


def _namespace_rules(region: Region) -> list[k8s.rbac.v1.PolicyRuleArgs]:
    name = gateway_name(region.id)
    return [
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=[""],
            resources=["configmaps", "pods", "secrets", "endpoints", "services"],
            verbs=["get", "list", "watch"],
        ),
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=["networking.k8s.io"], resources=["ingresses/status"], verbs=["update"]
        ),
        # Leader election: create the lease once, then only touch its own.
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["create"]
        ),
        k8s.rbac.v1.PolicyRuleArgs(
            api_groups=["coordination.k8s.io"],
            resources=["leases"],
            resource_names=[f"{name}-leader"],
            verbs=["get", "update"],
        ),
        k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["events"], verbs=["create", "patch"]),
    ]


HEALTHZ_HOST = "127.0.0.1"


def _healthz_probe(host_network: bool) -> k8s.core.v1.ProbeArgs:
    # The kubelet probes from the host's network namespace: a hostNetwork gateway's loopback is its.
    return k8s.core.v1.ProbeArgs(
        http_get=k8s.core.v1.HTTPGetActionArgs(
            path="/healthz", port="metrics", host=HEALTHZ_HOST if host_network else None
        ),
        initial_delay_seconds=10,
        period_seconds=10,
        timeout_seconds=1,
    )


@dataclass(frozen=True)
class GatewayArgs:
    region: Region
    fleet: Fleet
    namespace: str
    # ingress-nginx, pinned by digest (kura.gateway_image): a release with the CVE-2025-1974 fix.
    image: str
    # kura.gateway_drain_seconds and kura.gateway_min_ready_seconds (GATEWAY_DNS_SECONDS outside dev).
    drain_seconds: int = GATEWAY_DRAIN_SECONDS
    min_ready_seconds: int = GATEWAY_MIN_READY_SECONDS


def _one_per_box(labels: dict[str, str], *, required: bool) -> k8s.core.v1.AffinityArgs:
    """One controller per box. Required on hostNetwork (two would fight for :443). Preferred behind
    a Service with externalTrafficPolicy Local: a box without its own controller drops the clients
    its node port takes, but a rollout's surge pod may share a box for a while."""
    term = k8s.core.v1.PodAffinityTermArgs(
        label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
        topology_key="kubernetes.io/hostname",
    )
    if required:
        anti = k8s.core.v1.PodAntiAffinityArgs(required_during_scheduling_ignored_during_execution=[term])
    else:
        anti = k8s.core.v1.PodAntiAffinityArgs(
            preferred_during_scheduling_ignored_during_execution=[
                k8s.core.v1.WeightedPodAffinityTermArgs(weight=100, pod_affinity_term=term)
            ]
        )
    return k8s.core.v1.AffinityArgs(pod_anti_affinity=anti)


class Gateway(pulumi.ComponentResource):
    """ServiceAccount + RBAC, ConfigMap, Service, IngressClass, Deployment and PodDisruptionBudget of
    one region."""

    def __init__(self, name: str, args: GatewayArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:gateway:Gateway", name, None, opts)
        region, ns = args.region, args.namespace
        host_network = region.gateway is GatewayMode.HOST_NETWORK
        gw = gateway_name(region.id)
        labels = region_labels(name="kura-gateway", component="gateway", region=region.id)
        if region.gateway is GatewayMode.NODE_PORT:
            labels = {**labels, DATA_PLANE_LABEL: NODE_PORT_DATA_PLANE}
        child = child_options(self, opts)
        # One ServiceAccount name per region: several regions share the namespace.
        sa_name = f"{GATEWAY_SERVICE_ACCOUNT}-{region.id}"

        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=metadata(sa_name, ns, labels), opts=child
        )
        subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=sa_name, namespace=ns)
        self.role = k8s.rbac.v1.Role(
            f"{name}-role", metadata=metadata(gw, ns, labels), rules=_namespace_rules(region), opts=child
        )
        self.role_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding",
            metadata=metadata(gw, ns, labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=gw),
            subjects=[subject],
            opts=child,
        )
        self.cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-clusterrole", metadata=metadata(gw, None, labels), rules=_cluster_rules(), opts=child
        )
        self.cluster_role_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-clusterrolebinding",
            metadata=metadata(gw, None, labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=gw
            ),
            subjects=[subject],
            opts=child,
        )
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=metadata(gw, ns, labels),
            data=nginx_settings(region.gateway),
            opts=child,
        )
        # A node_port region's ports are pinned (config: its node_ports): its runners are set up with
        # them, from the stack outputs.
        pinned = region.gateway_node_ports
        ports = [
            k8s.core.v1.ServicePortArgs(
                name=name, port=port, target_port=name, protocol="TCP", node_port=node_port_of
            )
            for name, port, node_port_of in (
                ("http", 80, pinned.http if pinned else None),
                ("https", 443, pinned.https if pinned else None),
            )
        ]
        node_port = region.gateway is GatewayMode.NODE_PORT
        self.service = k8s.core.v1.Service(
            f"{name}-service",
            metadata=metadata(gw, ns, labels),
            spec=k8s.core.v1.ServiceSpecArgs(
                type="ClusterIP" if host_network else "NodePort" if node_port else "LoadBalancer",
                # Local keeps the client address and skips the second hop through kube-proxy.
                external_traffic_policy=None if host_network else "Local",
                selector=labels,
                ports=ports,
            ),
            opts=child,
        )
        self.network_policy: k8s.networking.v1.NetworkPolicy | None = None
        if node_port:
            # Local traffic policy keeps the client's address, so the policy sees the runner, not a
            # node that forwarded it.
            self.network_policy = k8s.networking.v1.NetworkPolicy(
                f"{name}-clients",
                metadata=metadata(f"{gw}-clients", ns, labels),
                spec=k8s.networking.v1.NetworkPolicySpecArgs(
                    pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                    policy_types=["Ingress"],
                    ingress=[
                        k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                            from_=[
                                k8s.networking.v1.NetworkPolicyPeerArgs(
                                    ip_block=k8s.networking.v1.IPBlockArgs(cidr=cidr)
                                )
                                for cidr in region.client_cidrs
                            ],
                            ports=[
                                k8s.networking.v1.NetworkPolicyPortArgs(port="http", protocol="TCP"),
                                k8s.networking.v1.NetworkPolicyPortArgs(port="https", protocol="TCP"),
                            ],
                        )
                    ],
                ),
                opts=child,
            )
        self.ingress_class = k8s.networking.v1.IngressClass(
            f"{name}-ingressclass",
            metadata=metadata(region.ingress_class, None, labels),
            spec=k8s.networking.v1.IngressClassSpecArgs(controller=controller_class(region)),
            opts=child,
        )
        # One controller per box: on hostNetwork two on one box would fight for :443. A parked fleet
        # has no box: zero replicas, so nothing waits on a pod that cannot run.
        replicas = args.fleet.size if args.fleet.enabled else 0
        grace = args.drain_seconds + GATEWAY_CONNECTION_DRAIN_SECONDS
        timeout = roll_timeout_seconds(
            replicas, grace_seconds=grace, min_ready_seconds=args.min_ready_seconds
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=metadata(gw, ns, labels, annotations={TIMEOUT_ANNOTATION: str(timeout)}),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                # hostNetwork ports cannot surge on the same box; replace one box at a time.
                strategy=k8s.apps.v1.DeploymentStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=0, max_unavailable=1),
                )
                if host_network
                else None,
                # The new gateway is in the published record, and in resolvers' caches, before the
                # next box's gateway stops.
                min_ready_seconds=args.min_ready_seconds,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=sa_name,
                        host_network=host_network,
                        dns_policy="ClusterFirstWithHostNet" if host_network else "ClusterFirst",
                        node_selector=pool_node_selector(args.fleet),
                        tolerations=pool_tolerations(args.fleet),
                        affinity=_one_per_box(labels, required=host_network),
                        # The preStop sleep, then nginx's own drain after SIGTERM.
                        termination_grace_period_seconds=grace,
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="controller",
                                image=args.image,
                                args=controller_args(region, ns),
                                env=[
                                    pod_field_env("POD_NAME", "metadata.name"),
                                    pod_field_env("POD_NAMESPACE", "metadata.namespace"),
                                ],
                                ports=[
                                    k8s.core.v1.ContainerPortArgs(
                                        name="http", container_port=80, protocol="TCP"
                                    ),
                                    k8s.core.v1.ContainerPortArgs(
                                        name="https", container_port=443, protocol="TCP"
                                    ),
                                    k8s.core.v1.ContainerPortArgs(
                                        name="metrics", container_port=10254, protocol="TCP"
                                    ),
                                ],
                                liveness_probe=_healthz_probe(host_network),
                                readiness_probe=_healthz_probe(host_network),
                                # Serve on while the wildcard moves off the box: the reconciler drops
                                # a terminating pod at its next pass, but clients hold the old answer
                                # for a TTL. ingress-nginx stops accepting at SIGTERM, which comes after.
                                lifecycle=k8s.core.v1.LifecycleArgs(
                                    pre_stop=k8s.core.v1.LifecycleHandlerArgs(
                                        sleep=k8s.core.v1.SleepActionArgs(seconds=args.drain_seconds)
                                    )
                                ),
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}
                                ),
                                # The stock image runs as www-data (101) and binds :80/:443.
                                security_context=k8s.core.v1.SecurityContextArgs(
                                    run_as_user=101,
                                    run_as_non_root=True,
                                    allow_privilege_escalation=False,
                                    capabilities=k8s.core.v1.CapabilitiesArgs(
                                        drop=["ALL"], add=["NET_BIND_SERVICE"]
                                    ),
                                ),
                            )
                        ],
                    ),
                ),
            ),
            opts=child_options(self, opts, depends_on=[self.config_map]),
        )
        # A drain (the machine provider's, through the Eviction API) takes one gateway at a time: a
        # second box's waits until the first one's replacement is Ready somewhere. A gateway that is
        # not Ready serves nothing (the wildcard left it), so it never holds a drain up.
        self.disruption_budget = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb",
            metadata=metadata(gw, ns, labels),
            spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
                max_unavailable=1,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                unhealthy_pod_eviction_policy="AlwaysAllow",
            ),
            opts=child,
        )
        self.register_outputs(
            {
                "name": gw,
                "ingress_class": region.ingress_class,
                "mode": region.gateway.value,
                "load_balancer": "host-network" if host_network else "node-port" if node_port else "pending",
            }
        )
