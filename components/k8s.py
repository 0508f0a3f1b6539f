"""Shared Kubernetes naming, labels and scheduling helpers for the Kura components.

Pure functions only: every component builds its metadata and pool placement through
these, so a region's objects agree on names, labels and which boxes they run on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import pulumi

from components import kube as k8s
from config.models import Environment, Fleet
from providers.machine.spec import node_taints

__all__ = [
    "CONTROLLER_RESOURCES",
    "MANAGED_BY",
    "NONROOT_UID",
    "POOL_LABEL",
    "child_options",
    "config_hash",
    "env_suffix",
    "heartbeat_probe",
    "heartbeat_volume",
    "locked_down",
    "metadata",
    "pool_node_selector",
    "pool_taints",
    "pool_toleration_dicts",
    "pool_tolerations",
    "prefer_off_pool",
    "region_labels",
    "secret_hash",
]

# The pool label every adopted box carries (the self-join stamps it) and every
# regional workload selects on.
POOL_LABEL = "node.cluster.x-k8s.io/pool"
# Pulumi, not kura-controller, owns these objects here; the label says so.
MANAGED_BY = "tuist-infra"


def env_suffix(environment: Environment) -> str:
    """Public hostname suffix: empty in production, `-<env>` elsewhere (regions.ex)."""
    return "" if environment is Environment.PRODUCTION else f"-{environment.value}"


def region_labels(*, name: str, component: str, region: str) -> dict[str, str]:
    """The recommended app.kubernetes.io labels plus the region, used as selectors too."""
    return {
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/instance": region,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "tuist.dev/region": region,
    }


def metadata(
    name: str,
    namespace: str | None,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> k8s.meta.v1.ObjectMetaArgs:
    # An explicit name (no Pulumi auto-suffix): other objects and the watcher address
    # these by name, and the anchor's names are part of the operational contract.
    return k8s.meta.v1.ObjectMetaArgs(
        name=name, namespace=namespace, labels=dict(labels), annotations=annotations
    )


def pool_node_selector(fleet: Fleet) -> dict[str, str]:
    return {POOL_LABEL: fleet.node_pool}


def pool_taints(fleet: Fleet) -> list[dict[str, str]]:
    """Every taint the fleet's Nodes register with: its own, and on Robot the runner-tier taint the
    machine adds (providers/machine/spec.py node_taints). `value` is "" when the taint has none."""
    own = [{"key": t.key, "value": t.value or "", "effect": t.effect.value} for t in fleet.taints]
    return node_taints(fleet.vendor, own)


def pool_toleration_dicts(fleet: Fleet) -> list[dict[str, str]]:
    """One toleration per taint of the pool's Nodes (pool_taints), matching key, value and effect
    exactly, as a pod spec (or a controller's settings) has it: a pool's pods run on it whatever
    vendor it is on."""
    return [
        {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
        if t["value"]
        else {"key": t["key"], "operator": "Exists", "effect": t["effect"]}
        for t in pool_taints(fleet)
    ]


def pool_tolerations(fleet: Fleet) -> list[k8s.core.v1.TolerationArgs]:
    """pool_toleration_dicts, typed for a pod spec the program writes."""
    return [
        k8s.core.v1.TolerationArgs(
            key=t["key"], operator=t["operator"], value=t.get("value"), effect=t["effect"]
        )
        for t in pool_toleration_dicts(fleet)
    ]


# The small in-cluster loops (failover watcher, demux routes, public DNS) run as distroless's nonroot.
NONROOT_UID = 65532
# What one of those loops needs: it waits on the API server most of the time.
CONTROLLER_RESOURCES = k8s.core.v1.ResourceRequirementsArgs(
    requests={"cpu": "10m", "memory": "64Mi"}, limits={"memory": "128Mi"}
)


def prefer_off_pool(fleet: Fleet) -> k8s.core.v1.AffinityArgs:
    """Prefer a node outside the pool a loop acts for: losing one of those boxes must not also take
    the one process that acts on its loss."""
    return k8s.core.v1.AffinityArgs(
        node_affinity=k8s.core.v1.NodeAffinityArgs(
            preferred_during_scheduling_ignored_during_execution=[
                k8s.core.v1.PreferredSchedulingTermArgs(
                    weight=100,
                    preference=k8s.core.v1.NodeSelectorTermArgs(
                        match_expressions=[
                            k8s.core.v1.NodeSelectorRequirementArgs(
                                key=POOL_LABEL, operator="NotIn", values=[fleet.node_pool]
                            )
                        ]
                    ),
                )
            ]
        )
    )


def locked_down(uid: int = NONROOT_UID) -> k8s.core.v1.SecurityContextArgs:
    """A container that needs nothing of the node: non-root, read-only root, no privilege, no capability."""
    return k8s.core.v1.SecurityContextArgs(
        run_as_non_root=True,
        run_as_user=uid,
        read_only_root_filesystem=True,
        allow_privilege_escalation=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
    )


def heartbeat_volume() -> k8s.core.v1.VolumeArgs:
    """The `run` emptyDir a loop writes its heartbeat into (its root filesystem is read-only)."""
    return k8s.core.v1.VolumeArgs(
        name="run", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(medium="Memory", size_limit="1Mi")
    )


def heartbeat_probe(run_dir: str) -> k8s.core.v1.ProbeArgs:
    """Alive while the deadline the loop last wrote to `<run_dir>/heartbeat` has not passed
    (watcher/heartbeat.py; the image is Debian: sh, date, cat). A loop hung on a call that never
    returns misses it and is restarted."""
    check = ["/bin/sh", "-c", f'[ "$(date +%s)" -le "$(cat {run_dir}/heartbeat)" ]']
    return k8s.core.v1.ProbeArgs(
        exec_=k8s.core.v1.ExecActionArgs(command=check),
        initial_delay_seconds=30,
        period_seconds=30,
        failure_threshold=2,
    )


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def secret_hash(value: pulumi.Input[str]) -> pulumi.Output[str]:
    """config_hash of a secret, for a pod-template annotation: a container reads a Secret (an env
    secretKeyRef, or a file it reads once) only when it starts, so the template has to change with
    the value for a rotation to roll the pods.

    Not secret: a sha256 of a high-entropy value (a random API token) reveals nothing of it, and a
    secret anywhere in the template would have Pulumi mask the Deployment's whole spec in every diff.
    Only for such values: a short or guessable one could be recovered from its hash."""
    return pulumi.Output.unsecret(pulumi.Output.from_input(value).apply(config_hash))


def child_options(
    parent: pulumi.Resource,
    opts: pulumi.ResourceOptions | None,
    *,
    depends_on: Sequence[pulumi.Resource] = (),
    **extra: Any,
) -> pulumi.ResourceOptions:
    """Options for a component's child: parented, and held back by what the component itself was
    told to wait for (Pulumi does not pass a component's depends_on on to its children), e.g. the
    namespace its objects live in."""
    given: Any = opts.depends_on if opts is not None else None
    inherited = [] if given is None else [given] if isinstance(given, pulumi.Resource) else list(given)
    deps = [*inherited, *depends_on]
    return pulumi.ResourceOptions(parent=parent, depends_on=deps or None, **extra)


def bound_role(
    name: str,
    *,
    role_name: str,
    namespace: str,
    labels: dict[str, str],
    rules: Sequence[k8s.rbac.v1.PolicyRuleArgs],
    subject: k8s.rbac.v1.SubjectArgs,
    opts: pulumi.ResourceOptions,
) -> tuple[k8s.rbac.v1.Role, k8s.rbac.v1.RoleBinding]:
    """The Role `role_name` with `rules` and the RoleBinding (of the same name) of `subject` to it;
    their Pulumi names are `<name>-role` and `<name>-rolebinding`."""
    meta = metadata(role_name, namespace, labels)
    role = k8s.rbac.v1.Role(f"{name}-role", metadata=meta, rules=list(rules), opts=opts)
    binding = k8s.rbac.v1.RoleBinding(
        f"{name}-rolebinding",
        metadata=meta,
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=role_name),
        subjects=[subject],
        opts=opts,
    )
    return role, binding


def bound_cluster_role(
    name: str,
    *,
    role_name: str,
    labels: dict[str, str],
    rules: Sequence[k8s.rbac.v1.PolicyRuleArgs],
    subject: k8s.rbac.v1.SubjectArgs,
    opts: pulumi.ResourceOptions,
) -> tuple[k8s.rbac.v1.ClusterRole, k8s.rbac.v1.ClusterRoleBinding]:
    """bound_role's cluster-scoped sibling: the ClusterRole `role_name` and its ClusterRoleBinding of
    `subject`; their Pulumi names are `<name>-clusterrole` and `<name>-clusterrolebinding`."""
    meta = metadata(role_name, None, labels)
    role = k8s.rbac.v1.ClusterRole(f"{name}-clusterrole", metadata=meta, rules=list(rules), opts=opts)
    binding = k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-clusterrolebinding",
        metadata=meta,
        role_ref=k8s.rbac.v1.RoleRefArgs(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role_name
        ),
        subjects=[subject],
        opts=opts,
    )
    return role, binding


def pod_field_env(name: str, field_path: str) -> k8s.core.v1.EnvVarArgs:
    """An environment variable the downward API fills from the pod's own `field_path`
    (`metadata.name`, `metadata.namespace`)."""
    return k8s.core.v1.EnvVarArgs(
        name=name,
        value_from=k8s.core.v1.EnvVarSourceArgs(
            field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path=field_path)
        ),
    )
