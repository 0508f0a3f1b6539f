"""Cluster-wide pieces of the Linux runners: the RunnerPool CRD schema, the
runners-controller, the kata-qemu RuntimeClass and the Cilium override for Kata nodes.

The manifests' content is built by pure functions (tested directly); the
ComponentResources below only register them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from components import kube as k8s
from components.capacity import DEFAULT_MIN_WARM_POOL_FLOOR, DEFAULT_SCALE_DOWN_COOLDOWN_SECONDS
from components.runner_pool import (
    KATA_NODE_LABELS,
    KATA_POD_OVERHEAD,
    KATA_RUNTIME_CLASS,
    RUNNER_POOL_GROUP,
    RUNNER_POOL_KIND,
    RUNNER_POOL_VERSION,
    RUNNER_TIER_TOLERATION,
    RunnerPool,
    RunnerPoolArgs,
)
from config.models import Cluster, Fleet
from config.models import RunnerPool as RunnerPoolConfig
from providers.crd import CrdNames, crd_spec, object_schema

RUNNER_POOL_PLURAL = "runnerpools"
RUNNER_POOL_CRD_NAME = f"{RUNNER_POOL_PLURAL}.{RUNNER_POOL_GROUP}"

# Stamped by the Robot install next to Kata's own label; ours scopes the Cilium override
# to the bare-metal Kata hosts and leaves every other node's Cilium alone.
KATA_CILIUM_NODE_LABELS: dict[str, str] = {"tuist.dev/kata-runtime": "true"}

CILIUM_NODE_CONFIG_NAME = "kata-bare-metal"
CILIUM_NAMESPACE = "kube-system"
# Cilium's default ratio (0.0025) sizes BPF maps from node memory; on 64-256 GiB hosts
# the allocation outlasts the agent's start-hook deadline and the agent dies before it
# binds its API socket. 0.0005 keeps the memory-derived maps small, and explicit caps
# bound the CT and NAT maps (explicit sizes win over the ratio). A host runs at most 64
# microVMs (AX162-R); 2^19 TCP and 2^18 non-TCP entries leave ~8k tracked flows per
# microVM, and NAT gets Cilium's own 2/3 of (tcp + any) = 2^19. All three together
# cost well under 150 MiB of locked memory.
CILIUM_KATA_DEFAULTS: dict[str, str] = {
    "bpf-map-dynamic-size-ratio": "0.0005",
    "bpf-ct-global-tcp-max": "524288",
    "bpf-ct-global-any-max": "262144",
    "bpf-nat-global-max": "524288",
}

CONTROLLER_NAME = "runners-controller"
CONTROLLER_LEASE_NAME = "runners-controller.tuist.dev"
CONTROLLER_LABELS: dict[str, str] = {
    "app.kubernetes.io/name": CONTROLLER_NAME,
    "app.kubernetes.io/component": "controller",
    "app.kubernetes.io/part-of": "tuist-runners",
}
# The controller runs as the distroless nonroot user.
CONTROLLER_UID = 65532

# RunnerPool CRD defaults (tuist-anchor.md 6.1).
DEFAULT_REPLICAS = 0
DEFAULT_OS = "darwin"
DEFAULT_POD_CPU_MILLI = 8000
DEFAULT_POD_MEMORY_MB = 14336

# Same rule as config.models.DigestImage.
DIGEST_IMAGE_PATTERN = r"^[a-z0-9.\-/:_]+@sha256:[0-9a-f]{64}$"


# --- the RunnerPool CRD -----------------------------------------------------------


def _string_list(min_items: int = 0) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "array", "items": {"type": "string", "minLength": 1}}
    if min_items:
        schema["minItems"] = min_items
    return schema


def _toleration_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "key": {"type": "string"},
            "operator": {"type": "string", "enum": ["Exists", "Equal"]},
            "value": {"type": "string"},
            "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "tolerationSeconds": {"type": "integer", "format": "int64"},
        },
    }


def runner_pool_openapi_schema() -> dict[str, Any]:
    """openAPIV3Schema of RunnerPool v1alpha1 (tuist-anchor.md 6.1).

    Two additions to the reference spec: `nodeSelector` and `tolerations`, so a pool
    says where its pods go instead of the controller hard-coding it per OS.
    Defaults apply only where a field is absent: an explicit 0 is kept (the anchor's
    incident was an omitted 0 re-defaulted to 1).
    """
    non_negative_int: dict[str, Any] = {"type": "integer", "format": "int32", "minimum": 0}
    positive_int: dict[str, Any] = {"type": "integer", "format": "int32", "minimum": 1}
    spec = {
        "type": "object",
        "required": ["image", "fleetSelector", "dispatchLabel", "runnerLabels"],
        "properties": {
            "labels": {**_string_list(), "description": "Extra labels stamped on the runner pods."},
            "replicas": {
                **non_negative_int,
                "default": DEFAULT_REPLICAS,
                "description": "Warm microVMs wanted; the autoscaler owns it when autoscaling is enabled.",
            },
            "image": {"type": "string", "pattern": DIGEST_IMAGE_PATTERN},
            "fleetSelector": {
                "type": "string",
                "minLength": 1,
                "description": "Value of the tuist.dev/fleet label of the nodes the pool runs on.",
            },
            "dispatchLabel": {
                "type": "string",
                "minLength": 1,
                "description": "GitHub runs-on label; unique per fleet (checked in config).",
            },
            "runnerLabels": {
                **_string_list(min_items=1),
                "description": "Labels the runner registers with; the server treats empty as a bug.",
            },
            "os": {"type": "string", "enum": ["darwin", "linux"], "default": DEFAULT_OS},
            "podCPUMilli": {**positive_int, "default": DEFAULT_POD_CPU_MILLI},
            "podMemoryMB": {**positive_int, "default": DEFAULT_POD_MEMORY_MB},
            "runtimeClass": {"type": "string", "minLength": 1},
            "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
            "tolerations": {"type": "array", "items": _toleration_schema()},
            "autoscaling": {
                "type": "object",
                "properties": {
                    "enabled": {"type": "boolean"},
                    "minWarmPoolFloor": {**non_negative_int, "default": DEFAULT_MIN_WARM_POOL_FLOOR},
                    # No default: unset or 0 means the autoscaler leaves replicas alone.
                    "maxReplicas": non_negative_int,
                    "scaleDownCooldownSeconds": {
                        **non_negative_int,
                        "default": DEFAULT_SCALE_DOWN_COOLDOWN_SECONDS,
                    },
                },
            },
        },
    }
    status = {
        "type": "object",
        "properties": {
            "observedReplicas": {"type": "integer", "format": "int32"},
            "lastReconcile": {"type": "string", "format": "date-time"},
            "lastScaleDownAt": {"type": "string", "format": "date-time"},
            "observedImage": {"type": "string"},
            "imageRolledAt": {"type": "string", "format": "date-time"},
        },
    }
    return object_schema(spec, status)


def runner_pool_crd_spec() -> dict[str, Any]:
    """CustomResourceDefinition spec, in the apiserver's (camelCase) shape."""
    names = CrdNames(RUNNER_POOL_GROUP, RUNNER_POOL_VERSION, RUNNER_POOL_KIND, RUNNER_POOL_PLURAL, ["rpool"])
    columns = [
        {"name": "OS", "type": "string", "jsonPath": ".spec.os"},
        {"name": "Fleet", "type": "string", "jsonPath": ".spec.fleetSelector"},
        {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"},
        {"name": "Observed", "type": "integer", "jsonPath": ".status.observedReplicas"},
    ]
    return crd_spec(names, runner_pool_openapi_schema(), columns)


# --- runners-controller -------------------------------------------------------------


def controller_role_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    """What the upstream runners-controller does in its namespace, rule for rule its kubebuilder RBAC
    markers (tuist/tuist infra/runners-controller/controllers/*.go): no Secrets, no wildcards.

    Left out: `pods/log` (the PodLifecycle reconciler reads a dead runner's log, and upstream wires it
    only with --sessions-url, which we do not pass)."""
    rule = k8s.rbac.v1.PolicyRuleArgs
    return [
        # One Pod + ServiceAccount per microVM (the SA token is what dispatch checks); patch is the
        # drain-eligible label a stale-image Pod gets during an image roll. SAs are never patched.
        rule(
            api_groups=[""], resources=["pods"], verbs=["get", "list", "watch", "create", "patch", "delete"]
        ),
        rule(
            api_groups=[""], resources=["serviceaccounts"], verbs=["get", "list", "watch", "create", "delete"]
        ),
        # The autoscaler patches spec.replicas; the pool reconciler adds its drain finalizer (update).
        rule(
            api_groups=[RUNNER_POOL_GROUP],
            resources=[RUNNER_POOL_PLURAL],
            verbs=["get", "list", "watch", "update", "patch"],
        ),
        rule(
            api_groups=[RUNNER_POOL_GROUP],
            resources=[f"{RUNNER_POOL_PLURAL}/status"],
            verbs=["get", "update", "patch"],
        ),
        # client-go's recorder patches a repeated event instead of creating a new one.
        rule(api_groups=["", "events.k8s.io"], resources=["events"], verbs=["create", "patch"]),
        # Leader election (always on upstream, in the pod's own namespace): create cannot be narrowed
        # by name, the rest can.
        rule(api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["create"]),
        rule(
            api_groups=["coordination.k8s.io"],
            resources=["leases"],
            resource_names=[CONTROLLER_LEASE_NAME],
            verbs=["get", "update"],
        ),
    ]


def controller_cluster_rules() -> list[k8s.rbac.v1.PolicyRuleArgs]:
    """Nodes are cluster-scoped. Upstream's pool reconciler watches them (a cordoned node's idle
    runners are retired so the drain can finish) and the autoscaler and the provisioning admission
    list the fleet's nodes: without list and watch its Node informer never syncs and the manager
    exits at start. Upstream's marker also has `patch`, used only by the node reservation (a taint
    that holds a host for a starved large shape); that step logs and carries on when refused, so a
    cluster-wide node write stays out (the lead decides whether to grant it)."""
    return [k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"])]


def controller_args(namespace: str) -> list[str]:
    """Only flags upstream's cmd/manager/main.go defines (an unknown one exits 2 at start). Leader
    election is always on there, with the Lease `runners-controller.tuist.dev` in the pod's own
    namespace: neither is a flag."""
    return [
        f"--namespace={namespace}",
        "--health-probe-bind-address=:8081",
        "--metrics-bind-address=:8080",
    ]


# Where on the Tuist server (seed 003): the dispatch endpoint the runner Pods poll, and the load
# signals the autoscaler GETs every 5 s (upstream appends ?fleet=<pool>).
DISPATCH_PATH = "/api/internal/runners/dispatch"
SCALING_SIGNALS_PATH = "/api/internal/runners/desired_replicas"


@dataclass(frozen=True)
class RunnersControllerArgs:
    namespace: str
    # Pinned (release tag or digest) outside dev: config.rules checks it.
    image: str
    # The Tuist server it sends the runners to for dispatch and asks for desired replicas every 5 s
    # (seed 003); required once a pool exists (config.rules).
    server_url: str | None = None
    # Two replicas with leader election: a node drain never leaves pools unreconciled.
    replicas: int = 2
    # What must exist before its pods start: the RunnerPool CRD (its informer must sync at start, or
    # the manager exits) and the runtime class its Linux runner pods name.
    after: Sequence[pulumi.Resource] = ()


def controller_env(server_url: str) -> list[k8s.core.v1.EnvVarArgs]:
    """The two URLs upstream reads from its environment. TUIST_RUNNER_DISPATCH_INTERNAL_URL (an
    in-cluster dispatch URL for Linux pools) is left out: the config has no in-cluster server URL,
    and upstream falls back to the dispatch URL without it."""
    base = server_url.rstrip("/")
    return [
        k8s.core.v1.EnvVarArgs(name="TUIST_RUNNER_DISPATCH_URL", value=f"{base}{DISPATCH_PATH}"),
        k8s.core.v1.EnvVarArgs(name="TUIST_SCALING_SIGNALS_URL", value=f"{base}{SCALING_SIGNALS_PATH}"),
    ]


class RunnersController(pulumi.ComponentResource):
    """Namespace, ServiceAccount, namespaced RBAC (+ read-only nodes) and the leader-elected
    Deployment."""

    def __init__(self, name: str, args: RunnersControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:runners:RunnersController", name, None, opts)
        meta = k8s.meta.v1.ObjectMetaArgs
        self.namespace = ns = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=meta(name=args.namespace, labels={"app.kubernetes.io/part-of": "tuist-runners"}),
            opts=pulumi.ResourceOptions(parent=self),
        )
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        named = meta(name=CONTROLLER_NAME, namespace=args.namespace, labels=CONTROLLER_LABELS)
        subject = k8s.rbac.v1.SubjectArgs(
            kind="ServiceAccount", name=CONTROLLER_NAME, namespace=args.namespace
        )

        k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=named, opts=in_ns)
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=named, rules=controller_role_rules(), opts=in_ns)
        role_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding",
            metadata=named,
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="Role", name=CONTROLLER_NAME
            ),
            subjects=[subject],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, role]),
        )
        cluster_meta = meta(name=CONTROLLER_NAME, labels=CONTROLLER_LABELS)
        cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-clusterrole",
            metadata=cluster_meta,
            rules=controller_cluster_rules(),
            opts=pulumi.ResourceOptions(parent=self),
        )
        cluster_role_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-clusterrolebinding",
            metadata=cluster_meta,
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=CONTROLLER_NAME
            ),
            subjects=[subject],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[ns, cluster_role]),
        )
        # Upstream exits 1 at start without a dispatch URL. config.rules requires the server URL once
        # a pool exists; without one there is nothing to run, so the controller stays at zero
        # replicas instead of crash-looping.
        env = controller_env(args.server_url) if args.server_url is not None else None
        replicas = args.replicas if args.server_url is not None else 0
        container = k8s.core.v1.ContainerArgs(
            name="manager",
            image=args.image,
            args=controller_args(args.namespace),
            env=env,
            ports=[
                k8s.core.v1.ContainerPortArgs(name="metrics", container_port=8080, protocol="TCP"),
                k8s.core.v1.ContainerPortArgs(name="health", container_port=8081, protocol="TCP"),
            ],
            liveness_probe=k8s.core.v1.ProbeArgs(
                http_get=k8s.core.v1.HTTPGetActionArgs(path="/healthz", port="health"), period_seconds=20
            ),
            readiness_probe=k8s.core.v1.ProbeArgs(
                http_get=k8s.core.v1.HTTPGetActionArgs(path="/readyz", port="health"), period_seconds=10
            ),
            resources=k8s.core.v1.ResourceRequirementsArgs(
                requests={"cpu": "100m", "memory": "128Mi"}, limits={"memory": "256Mi"}
            ),
            security_context=k8s.core.v1.SecurityContextArgs(
                allow_privilege_escalation=False,
                read_only_root_filesystem=True,
                run_as_non_root=True,
                capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
            ),
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=named,
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=replicas,
                selector=k8s.meta.v1.LabelSelectorArgs(
                    match_labels={"app.kubernetes.io/name": CONTROLLER_NAME}
                ),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=meta(labels=CONTROLLER_LABELS),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=CONTROLLER_NAME,
                        # Its own token is its identity twice: to the apiserver, and to the Tuist
                        # server, which checks it by TokenReview (upstream reads the mounted file on
                        # every call, so a rotated projected token needs no roll).
                        automount_service_account_token=True,
                        security_context=k8s.core.v1.PodSecurityContextArgs(
                            run_as_non_root=True,
                            run_as_user=CONTROLLER_UID,
                            run_as_group=CONTROLLER_UID,
                            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"),
                        ),
                        containers=[container],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[ns, role_binding, cluster_role_binding, *args.after]
            ),
        )
        self.register_outputs({"namespace": args.namespace, "deployment": CONTROLLER_NAME})


# --- Kata runtime and the Cilium override ----------------------------------------------


def runtime_class_scheduling() -> dict[str, Any]:
    """Pods of the class land only on Kata nodes: a node without the label fails loudly
    (Pending) instead of silently falling back to runc."""
    return {"nodeSelector": dict(KATA_NODE_LABELS), "tolerations": [dict(RUNNER_TIER_TOLERATION)]}


def cilium_node_config_spec() -> dict[str, Any]:
    return {
        "nodeSelector": {"matchLabels": dict(KATA_CILIUM_NODE_LABELS)},
        "defaults": dict(CILIUM_KATA_DEFAULTS),
    }


@dataclass(frozen=True)
class KataRuntimeArgs:
    runtime_class: str = KATA_RUNTIME_CLASS


class KataRuntime(pulumi.ComponentResource):
    """The kata-qemu RuntimeClass and the CiliumNodeConfig that keeps Cilium alive on Kata hosts."""

    def __init__(self, name: str, args: KataRuntimeArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:runners:KataRuntime", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        scheduling = runtime_class_scheduling()
        self.runtime_class = k8s.node.v1.RuntimeClass(
            f"{name}-runtimeclass",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=args.runtime_class),
            handler=args.runtime_class,
            overhead=k8s.node.v1.OverheadArgs(pod_fixed=dict(KATA_POD_OVERHEAD)),
            scheduling=k8s.node.v1.SchedulingArgs(
                node_selector=scheduling["nodeSelector"],
                tolerations=[k8s.core.v1.TolerationArgs(**t) for t in scheduling["tolerations"]],
            ),
            opts=child,
        )
        self.cilium_node_config = k8s.apiextensions.CustomResource(
            f"{name}-cilium-node-config",
            api_version="cilium.io/v2",
            kind="CiliumNodeConfig",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=CILIUM_NODE_CONFIG_NAME, namespace=CILIUM_NAMESPACE),
            spec=cilium_node_config_spec(),
            opts=child,
        )
        self.register_outputs(
            {"runtime_class": args.runtime_class, "cilium_node_config": CILIUM_NODE_CONFIG_NAME}
        )


# --- the entry the program calls --------------------------------------------------------


def pool_reference_problems(pools: list[RunnerPoolConfig], fleets: list[Fleet]) -> list[str]:
    names = {fleet.name for fleet in fleets}
    return [
        f"runner_pools[{i}].fleet: '{pool.fleet}' is not a configured fleet"
        for i, pool in enumerate(pools)
        if pool.fleet not in names
    ]


@dataclass(frozen=True)
class RunnerPoolsArgs:
    pools: list[RunnerPoolConfig]
    fleets: list[Fleet]
    cluster: Cluster


class RunnerPools(pulumi.ComponentResource):
    """Everything the runners need on the cluster: the RunnerPool CRD, the
    runners-controller, the Kata runtime and Cilium override, and one RunnerPool per pool.

    The Kubernetes provider comes from the caller's `opts.providers` and reaches every
    child through `parent`.
    """

    def __init__(self, name: str, args: RunnerPoolsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("tuist:runners:RunnerPools", name, None, opts)
        problems = pool_reference_problems(args.pools, args.fleets)
        if problems:
            raise ValueError("\n".join(problems))
        child = pulumi.ResourceOptions(parent=self)
        crd_spec = runner_pool_crd_spec()
        self.crd = k8s.apiextensions.v1.CustomResourceDefinition(
            f"{name}-crd",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=RUNNER_POOL_CRD_NAME),
            spec=k8s.apiextensions.v1.CustomResourceDefinitionSpecArgs(
                group=crd_spec["group"],
                scope=crd_spec["scope"],
                names=k8s.apiextensions.v1.CustomResourceDefinitionNamesArgs(
                    kind=RUNNER_POOL_KIND,
                    list_kind=crd_spec["names"]["listKind"],
                    plural=RUNNER_POOL_PLURAL,
                    singular=crd_spec["names"]["singular"],
                    short_names=crd_spec["names"]["shortNames"],
                ),
                versions=crd_spec["versions"],
            ),
            # Deleting a CRD deletes every object of its kind: the resource going from the program
            # (a rename, a removed component) must leave it in the cluster.
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True)),
        )
        namespace = args.cluster.runners_namespace
        fleets = {fleet.name: fleet for fleet in args.fleets}
        self.kata = KataRuntime(f"{name}-kata", KataRuntimeArgs(), opts=child)
        self.controller = RunnersController(
            f"{name}-controller",
            RunnersControllerArgs(
                namespace=namespace,
                image=args.cluster.runners_controller_image,
                server_url=args.cluster.tuist_server_url,
                after=(self.crd, self.kata.runtime_class),
            ),
            opts=child,
        )
        self.pools = [
            RunnerPool(
                f"{name}-{pool.name}",
                RunnerPoolArgs(pool=pool, fleet=fleets[pool.fleet], namespace=namespace),
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.crd, self.controller.namespace]),
            )
            for pool in args.pools
        ]
        self.register_outputs(
            {
                "crd": RUNNER_POOL_CRD_NAME,
                "namespace": namespace,
                "pools": [pool.name for pool in args.pools],
            }
        )
