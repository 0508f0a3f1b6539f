"""kura-controller: the Kura namespace, the controller's Deployment with the seeds' settings as its
environment, and least-privilege RBAC.

Seed 000 and 001 name what the controller is told, and nothing else is added here:
- `KURA_DISCOVERY_DNS_NAME`: Local scope on the account peer Service, so managed peers dial each
  other pod to pod; no global discovery name is wired at all (seed 000, "stop wiring the global
  discovery name").
- replicas 2 on bare-metal regions (a warm standby the controller fails the cache Service over to),
  with each region's pool, taints, storage and egress numbers: `TUIST_KURA_REGIONS`.
- the bootstrap tmp budget knobs (seed 001): `KURA_TMP_DIR_MAX_BYTES`, the concurrent peers and
  the per-peer artifact concurrency (seed 000: buffer_unordered, default 16).
- the explicit runtime image tag (seed 001: deploy with an explicit kura_runtime_image_tag).
- `TUIST_KURA_AVAILABLE_REGIONS` and `TUIST_KURA_PEER_FAILOVER_IPS` (only ordered IPs: a parked
  one stays out, as the seed parks it in values until ordered).
Every setting is in the pod template, so changing one rolls the controller.

The KuraInstance CustomResourceDefinition (kurainstances.kura.tuist.dev, v1alpha1) is installed here
too: the controller's KuraInstance informer starts with the manager, and without the kind it never
syncs and the manager exits at start. Its schema is deliberately permissive. The Tuist server writes
every KuraInstance (one per account) and owns and validates their fields; kura-controller reads them.
This program only needs the kind to exist with its status subresource (the controller writes status
through it), so the schema requires the four fields nothing works without (accountHandle, tenantID,
region, image: non-empty strings) and keeps every other field of spec and status as written
(`x-kubernetes-preserve-unknown-fields`) rather than pruning what a newer server adds. Deleting the
CRD deletes every KuraInstance, i.e. every account's cache, so it is retained when it leaves the
program and protected in production, as the Kura namespace is.

One owner only: on a cluster where the Tuist Helm chart also ships this CRD (its crds/ directory),
install the chart with `helm install --skip-crds`. Two owners would fight over the schema, each
apply rewriting the other's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from components import kube as k8s
from components.failover_watcher import failover_namespace
from components.k8s import (
    MANAGED_BY,
    child_options,
    pod_field_env,
    pool_node_selector,
    pool_toleration_dicts,
)
from config.models import Cluster, Environment, FailoverIP, Fleet, Kura, Region
from providers.crd import CrdNames, crd_spec, object_schema
from providers.machine.spec import EGRESS_MBPS_RESOURCE

__all__ = [
    "CONTROLLER_LEASE_NAME",
    "CONTROLLER_NAME",
    "EGRESS_BANDWIDTH_ANNOTATION",
    "KURA_INSTANCE_CRD_NAME",
    "KuraController",
    "KuraControllerArgs",
    "RegionPlacement",
    "controller_cluster_rules",
    "controller_env",
    "controller_rules",
    "kura_instance_crd_manifest",
    "region_exposed",
]

CONTROLLER_NAME = "kura-controller"
# Upstream's cmd/manager/main.go hardcodes its leader-election ID (no flag); the Lease lives in the
# pod's own namespace.
CONTROLLER_LEASE_NAME = "kura-controller.kura.tuist.dev"
KURA_GROUP = "kura.tuist.dev"
KURA_VERSION = "v1alpha1"
KURA_INSTANCE_KIND = "KuraInstance"
KURA_INSTANCE_PLURAL = "kurainstances"
KURA_INSTANCE_CRD_NAME = f"{KURA_INSTANCE_PLURAL}.{KURA_GROUP}"
# The spec fields without which an instance means nothing (the module doc: the rest is the server's).
KURA_INSTANCE_REQUIRED = ("accountHandle", "tenantID", "region", "image")
EGRESS_BANDWIDTH_ANNOTATION = "kubernetes.io/egress-bandwidth"
LABELS = {
    "app.kubernetes.io/name": CONTROLLER_NAME,
    "app.kubernetes.io/component": "controller",
    "app.kubernetes.io/part-of": "kura",
    "app.kubernetes.io/managed-by": MANAGED_BY,
}
CONTROLLER_UID = 65532


def region_exposed(region: Region, fleet: Fleet) -> bool:
    """Exposed when config says so and the fleet can have a box: a parked or empty fleet would
    advertise a region that serves nothing."""
    return region.exposed and fleet.machine_slots > 0


def routed_failover_address(fip: FailoverIP | None, fleet: Fleet) -> str | None:
    """The address the region's failover IP is routed to a box of its fleet at, or None: a parked IP
    (not ordered), or a fleet with no machine (parked or size 0), which has no box to route it to.
    Peer DNS, the watcher and kura-controller follow this, never the raw address: a name pointing at
    an IP that no box of the region holds would blackhole the peer mesh."""
    if fip is None or fip.address is None or fleet.machine_slots == 0:
        return None
    return fip.address


@dataclass(frozen=True)
class RegionPlacement:
    region: Region
    fleet: Fleet
    failover_ip: FailoverIP | None


def _region_settings(p: RegionPlacement, kura: Kura, environment: Environment) -> dict[str, Any]:
    region, fleet = p.region, p.fleet
    tolerations = pool_toleration_dicts(fleet)
    private = (
        {
            # A private region (the reference's scw-fr-par-runners): never offered to accounts, reached
            # on its node port from client_cidrs only, serving the named runner platforms. Public
            # regions' settings stay as they were (no roll of the controller for them).
            "private": True,
            "data_plane": region.gateway.value,
            "client_cidrs": list(region.client_cidrs),
            "runner_platforms": [platform.value for platform in region.runner_platforms],
        }
        if region.private
        else {}
    )
    return {
        **private,
        "cluster_id": region.cluster_id,
        "host": region.host,
        "gateway": region.gateway.value,
        "ingress_class": region.ingress_class,
        "replicas": region.replicas,
        "storage_class": region.storage_class,
        "storage_size": f"{region.storage_size_gi}Gi",
        "node_selector": pool_node_selector(fleet),
        "tolerations": tolerations,
        # Each pod requests its floor; each Node advertises its fleet's budget (NodeLabels).
        "pod_resource_requests": {EGRESS_MBPS_RESOURCE: str(region.egress_floor_mbps)},
        "pod_annotations": {EGRESS_BANDWIDTH_ANNOTATION: f"{region.egress_burst_mbps}M"},
        # The per-region public peer Service the region's SNI demux routes to (demux/routes.py).
        "mesh_peer_host_network": True,
        "public_peer_service": f"kura-{{account}}-{region.id}-peer",
        # Under the region's *.peer.<host> wildcard record: no DNS record per account.
        "public_peer_host": f"{{account}}.peer.{region.host}",
    }


def controller_env(
    placements: Sequence[RegionPlacement], kura: Kura, environment: Environment, cluster: Cluster
) -> dict[str, str]:
    """The kura-controller's environment: the seeds' settings, nothing else (see the module doc).

    `{account}` is filled in per account by kura-controller."""
    exposed = [p.region.id for p in placements if region_exposed(p.region, p.fleet)]
    routed = sorted(
        (p.region.id, address)
        for p in placements
        if (address := routed_failover_address(p.failover_ip, p.fleet)) is not None
    )
    regions = {p.region.id: _region_settings(p, kura, environment) for p in placements}
    return {
        "KURA_RUNTIME_IMAGE": f"{kura.runtime_image}:{kura.runtime_image_tag}",
        "KURA_DISCOVERY_DNS_NAME": f"kura-{{account}}-peer.{kura.namespace}.svc.{cluster.domain}",
        "KURA_PEER_PORT": str(kura.peer_port),
        "KURA_TMP_DIR_MAX_BYTES": str(kura.bootstrap_tmp_dir_max_bytes),
        "KURA_BOOTSTRAP_MAX_CONCURRENT_PEERS": str(kura.bootstrap_max_concurrent_peers),
        "KURA_BOOTSTRAP_ARTIFACT_CONCURRENCY": str(kura.bootstrap_artifact_concurrency),
        "TUIST_KURA_AVAILABLE_REGIONS": ",".join(exposed),
        "TUIST_KURA_PEER_FAILOVER_IPS": ",".join(f"{region}={ip}" for region, ip in routed),
        "TUIST_KURA_REGIONS": json.dumps(regions, sort_keys=True, separators=(",", ":")),
    }


def kura_instance_crd_manifest() -> dict[str, Any]:
    """The KuraInstance CRD, in the apiserver's (camelCase) shape: the names upstream's controller
    and the Tuist server use, and a structural schema of our own that only requires what it must
    (see the module doc)."""
    spec = {
        "type": "object",
        "description": "Written by the Tuist server, which owns and validates its fields.",
        "required": list(KURA_INSTANCE_REQUIRED),
        "properties": {field: {"type": "string", "minLength": 1} for field in KURA_INSTANCE_REQUIRED},
        "x-kubernetes-preserve-unknown-fields": True,
    }
    status = {
        "type": "object",
        "description": "Written by kura-controller, through the status subresource.",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    columns = [
        {"name": "Region", "type": "string", "jsonPath": ".spec.region"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    names = CrdNames(KURA_GROUP, KURA_VERSION, KURA_INSTANCE_KIND, KURA_INSTANCE_PLURAL, ["kura"])
    schema = object_schema(spec, status, "One account's Kura cache in one region.")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": KURA_INSTANCE_CRD_NAME,
            "labels": {"app.kubernetes.io/part-of": "kura", "app.kubernetes.io/managed-by": MANAGED_BY},
        },
        "spec": crd_spec(names, schema, columns),
    }


def controller_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    """What upstream kura-controller needs in the Kura namespace to take an account's KuraInstance to
    its StatefulSet, read off its KuraInstanceReconciler's kubebuilder RBAC markers and its reconcile
    order (tuist/tuist infra/kura-controller/controllers/kurainstance_controller.go). No wildcards.

    - Its informers start with the manager and must sync or it exits: KuraInstances, and (Owns or
      Watches) StatefulSets, Services, Secrets, Pods, Ingresses, NetworkPolicies and
      PodDisruptionBudgets: list and watch on each.
    - Before the StatefulSet each reconcile adds its finalizer, checks the data claims, writes the
      headless and account peer Services, the instance's public peer Service and its peer DNSEndpoint
      (mesh_peer_host_network regions), the Ingresses (or deletes them), deletes the per-instance
      Certificate (no --grpc-cluster-issuer), writes the peer TLS Secret and the account's peer CA
      Secret, the NetworkPolicy and the PodDisruptionBudget. After it: claim resizes, the unready
      pods of an image change, status.
    - Secrets: the pods mount their peer TLS Secret, which only the controller writes. The Kura
      namespace holds no vendor credential (the failover watchers' and external-dns's live in their
      own namespaces).
    - Not granted: ConfigMaps and DaemonSets (upstream's PeerDemuxReconciler would write our
      kura-peer-demux-<region> objects with them; the KuraInstance reconciler only reads them to retire
      a legacy account-wide peer Service, which this program never made), EndpointSlices (same
      legacy path), creating or deleting KuraInstances (the Tuist server's).
    """
    rule = k8s.rbac.v1.PolicyRuleArgs
    write = ["get", "list", "watch", "create", "update", "patch", "delete"]
    return [
        rule(api_groups=["apps"], resources=["statefulsets"], verbs=write),
        rule(api_groups=[""], resources=["services", "secrets"], verbs=write),
        # Readiness and the serving check of primary selection; an image change deletes unready pods.
        rule(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch", "delete"]),
        # The StatefulSet controller creates the claims; the controller grows them (patch) and drops
        # them when a volume can never bind again (a storage class change, a reprovisioned box).
        rule(
            api_groups=[""],
            resources=["persistentvolumeclaims"],
            verbs=["get", "list", "watch", "patch", "delete"],
        ),
        rule(api_groups=["networking.k8s.io"], resources=["ingresses", "networkpolicies"], verbs=write),
        rule(api_groups=["policy"], resources=["poddisruptionbudgets"], verbs=write),
        rule(api_groups=["externaldns.k8s.io"], resources=["dnsendpoints"], verbs=write),
        # Read and deleted uncached (unstructured): without --grpc-cluster-issuer it only removes the
        # per-instance Certificate and the legacy gRPC one.
        rule(api_groups=["cert-manager.io"], resources=["certificates"], verbs=["get", "delete"]),
        rule(
            api_groups=[KURA_GROUP],
            resources=["kurainstances"],
            verbs=["get", "list", "watch", "update", "patch"],
        ),
        rule(api_groups=[KURA_GROUP], resources=["kurainstances/status"], verbs=["get", "update", "patch"]),
        # Owner references that block the owner's deletion (admission checks this subresource).
        rule(api_groups=[KURA_GROUP], resources=["kurainstances/finalizers"], verbs=["update"]),
        rule(api_groups=["", "events.k8s.io"], resources=["events"], verbs=["create", "patch"]),
        # Leader election: create cannot be narrowed by name, the rest can.
        rule(api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["create"]),
        rule(
            api_groups=["coordination.k8s.io"],
            resources=["leases"],
            resource_names=[CONTROLLER_LEASE_NAME],
            verbs=["get", "update"],
        ),
    ]


def controller_cluster_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    rule = k8s.rbac.v1.PolicyRuleArgs
    return [
        # A Local-scope peer answers with its direct node URL: the node's InternalIP (seed 001); the
        # peer DNSEndpoint targets it too, and a claim pinned to a vanished node is found through it.
        rule(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"]),
        # A bound claim's volume is read (through the cache) for its node pin on every reconcile;
        # deleting an instance (or a stale claim) first flips the volume to reclaimPolicy Delete.
        rule(api_groups=[""], resources=["persistentvolumes"], verbs=["get", "list", "watch", "patch"]),
    ]


def controller_args(namespace: str) -> list[str]:
    """Only flags upstream's cmd/manager/main.go defines (an unknown one exits 2 at start). The
    leader-election ID is hardcoded there (CONTROLLER_LEASE_NAME) and the Lease namespace is the
    pod's own: neither is a flag."""
    return [
        "--leader-elect=true",
        f"--watch-namespace={namespace}",
        "--health-probe-bind-address=:8081",
        "--metrics-bind-address=:8080",
    ]


@dataclass(frozen=True)
class KuraControllerArgs:
    placements: Sequence[RegionPlacement]
    kura: Kura
    environment: Environment
    cluster: Cluster
    # Two, leader-elected: a drained node never leaves the cache without its failover controller.
    replicas: int = 2


class KuraController(pulumi.ComponentResource):
    """The KuraInstance CRD, namespace `kura`, ServiceAccount, Role + ClusterRole (nodes read,
    volumes' reclaim policy) and the Deployment."""

    crd: k8s.apiextensions.v1.CustomResourceDefinition
    namespace: k8s.core.v1.Namespace
    failover_namespace: k8s.core.v1.Namespace

    def __init__(self, name: str, args: KuraControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:kura_controller:KuraController", name, None, opts)
        kura, ns = args.kura, args.kura.namespace
        meta = k8s.meta.v1.ObjectMetaArgs
        production = args.environment is Environment.PRODUCTION
        crd = kura_instance_crd_manifest()
        self.crd = k8s.apiextensions.v1.CustomResourceDefinition(
            f"{name}-kurainstance-crd",
            metadata=crd["metadata"],
            spec=crd["spec"],
            # Deleting a CRD deletes every object of its kind: every account's KuraInstance, and with
            # it every account's cache. The resource going from the program (a rename, the last region
            # removed) leaves it in the cluster; in production removing it is an explicit unprotect.
            opts=child_options(self, opts, retain_on_delete=True, protect=production),
        )
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=meta(
                name=ns,
                labels={"app.kubernetes.io/part-of": "kura", "app.kubernetes.io/managed-by": MANAGED_BY},
            ),
            # Every account's instances and their volume claims live in it, created by kura-controller:
            # deleting it (a renamed namespace, the last region removed) wipes every region's cache.
            # In production that takes an explicit `pulumi state unprotect`, as a machine's release does.
            opts=child_options(self, opts, protect=production),
        )
        # The failover watchers' own namespace (components/failover_watcher.py): their vendor
        # credentials stay out of the Kura namespace, whose gateways read every Secret.
        self.failover_namespace = k8s.core.v1.Namespace(
            f"{name}-failover-namespace",
            metadata=meta(
                name=failover_namespace(ns),
                labels={"app.kubernetes.io/part-of": "kura", "app.kubernetes.io/managed-by": MANAGED_BY},
            ),
            opts=child_options(self, opts),
        )
        in_ns = child_options(self, opts, depends_on=[self.namespace])
        named = meta(name=CONTROLLER_NAME, namespace=ns, labels=LABELS)
        subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=CONTROLLER_NAME, namespace=ns)
        ref = k8s.rbac.v1.RoleRefArgs

        self.service_account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=named, opts=in_ns)
        self.role = k8s.rbac.v1.Role(f"{name}-role", metadata=named, rules=controller_rules(), opts=in_ns)
        self.role_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding",
            metadata=named,
            role_ref=ref(api_group="rbac.authorization.k8s.io", kind="Role", name=CONTROLLER_NAME),
            subjects=[subject],
            opts=in_ns,
        )
        self.cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-clusterrole",
            metadata=meta(name=CONTROLLER_NAME, labels=LABELS),
            rules=controller_cluster_rules(),
            opts=child_options(self, opts),
        )
        self.cluster_role_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-clusterrolebinding",
            metadata=meta(name=CONTROLLER_NAME, labels=LABELS),
            role_ref=ref(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=CONTROLLER_NAME),
            subjects=[subject],
            opts=child_options(self, opts, depends_on=[self.cluster_role]),
        )
        env = controller_env(args.placements, kura, args.environment, args.cluster)
        env_vars = [
            pod_field_env("POD_NAMESPACE", "metadata.namespace"),
            *(k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()),
        ]
        probe = k8s.core.v1.ProbeArgs
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=named,
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=args.replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(
                    match_labels={"app.kubernetes.io/name": CONTROLLER_NAME}
                ),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=meta(labels=LABELS),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=CONTROLLER_NAME,
                        security_context=k8s.core.v1.PodSecurityContextArgs(
                            run_as_non_root=True,
                            run_as_user=CONTROLLER_UID,
                            run_as_group=CONTROLLER_UID,
                            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
                        ),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="manager",
                                image=kura.controller_image,
                                args=controller_args(ns),
                                env=env_vars,
                                ports=[
                                    k8s.core.v1.ContainerPortArgs(
                                        name="metrics", container_port=8080, protocol="TCP"
                                    ),
                                    k8s.core.v1.ContainerPortArgs(
                                        name="health", container_port=8081, protocol="TCP"
                                    ),
                                ],
                                liveness_probe=probe(
                                    http_get=k8s.core.v1.HTTPGetActionArgs(path="/healthz", port="health"),
                                    period_seconds=20,
                                ),
                                readiness_probe=probe(
                                    http_get=k8s.core.v1.HTTPGetActionArgs(path="/readyz", port="health"),
                                    period_seconds=10,
                                ),
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "512Mi"}
                                ),
                                security_context=k8s.core.v1.SecurityContextArgs(
                                    allow_privilege_escalation=False,
                                    read_only_root_filesystem=True,
                                    capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
                                ),
                            )
                        ],
                    ),
                ),
            ),
            # Its KuraInstance informer must sync at start: the kind exists before the manager runs.
            opts=child_options(self, opts, depends_on=[self.crd, self.namespace, self.role_binding]),
        )
        self.register_outputs({"namespace": ns, "deployment": CONTROLLER_NAME, "crd": KURA_INSTANCE_CRD_NAME})
