"""Deployment, ServiceAccount and least-privilege RBAC of one region's failover watcher.

The watcher (package `watcher`, run as `python -m watcher`) reads Nodes cluster-wide and
lists the region's demux pods in the Kura namespace; it needs nothing else from the API.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import POOL_LABEL, metadata, region_labels
from config.models import FailoverIP, Fleet, Region

__all__ = ["FailoverWatcher", "FailoverWatcherArgs", "watcher_name"]


def watcher_name(region_id: str) -> str:
    return f"kura-failover-watcher-{region_id}"


@dataclass(frozen=True)
class FailoverWatcherArgs:
    region: Region
    fleet: Fleet
    failover_ip: FailoverIP
    namespace: str
    image: str
    # Secret holding the vendor API credentials as environment variables.
    credentials_secret: str = "tuist-failover-vendor-credentials"
    poll_seconds: int = 30
    confirm_polls: int = 2


class FailoverWatcher(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: FailoverWatcherArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tuist:failover_watcher:FailoverWatcher", name, None, opts)
        if args.failover_ip.address is None:
            raise ValueError(f"failover_ips '{args.failover_ip.name}' is parked; a watcher needs an address")
        region, ns = args.region, args.namespace
        wname = watcher_name(region.id)
        labels = region_labels(name="kura-failover-watcher", component="failover-watcher", region=region.id)
        child = pulumi.ResourceOptions(parent=self)
        subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=wname, namespace=ns)

        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata=metadata(wname, ns, labels),
            automount_service_account_token=True,
            opts=child,
        )
        self.cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-clusterrole",
            metadata=metadata(wname, None, labels),
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"]
                )
            ],
            opts=child,
        )
        self.cluster_role_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-clusterrolebinding",
            metadata=metadata(wname, None, labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=wname
            ),
            subjects=[subject],
            opts=child,
        )
        self.role = k8s.rbac.v1.Role(
            f"{name}-role",
            metadata=metadata(wname, ns, labels),
            rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["list"])],
            opts=child,
        )
        self.role_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-rolebinding",
            metadata=metadata(wname, ns, labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=wname),
            subjects=[subject],
            opts=child,
        )
        env = {
            "FAILOVER_IP": args.failover_ip.address,
            "FAILOVER_VENDOR": args.failover_ip.vendor.value,
            "REGION": region.id,
            "NODE_POOL": args.fleet.node_pool,
            "KURA_NAMESPACE": ns,
            "POLL_SECONDS": str(args.poll_seconds),
            "CONFIRM_POLLS": str(args.confirm_polls),
        }
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=metadata(wname, ns, labels),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                # Never two watchers at once: they could issue opposing moves.
                strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=wname,
                        # Prefer a node outside the pool it guards, so losing that box does
                        # not also take down the one process that moves the IP off it.
                        affinity=k8s.core.v1.AffinityArgs(
                            node_affinity=k8s.core.v1.NodeAffinityArgs(
                                preferred_during_scheduling_ignored_during_execution=[
                                    k8s.core.v1.PreferredSchedulingTermArgs(
                                        weight=100,
                                        preference=k8s.core.v1.NodeSelectorTermArgs(
                                            match_expressions=[
                                                k8s.core.v1.NodeSelectorRequirementArgs(
                                                    key=POOL_LABEL,
                                                    operator="NotIn",
                                                    values=[args.fleet.node_pool],
                                                )
                                            ]
                                        ),
                                    )
                                ]
                            )
                        ),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="watcher",
                                image=args.image,
                                command=["python", "-m", "watcher"],
                                env=[k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()],
                                env_from=[
                                    k8s.core.v1.EnvFromSourceArgs(
                                        secret_ref=k8s.core.v1.SecretEnvSourceArgs(
                                            name=args.credentials_secret
                                        )
                                    )
                                ],
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "10m", "memory": "64Mi"}, limits={"memory": "128Mi"}
                                ),
                                security_context=k8s.core.v1.SecurityContextArgs(
                                    run_as_non_root=True,
                                    run_as_user=65532,
                                    read_only_root_filesystem=True,
                                    allow_privilege_escalation=False,
                                    capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"]),
                                ),
                            )
                        ],
                    ),
                ),
            ),
            opts=child,
        )
        self.register_outputs({"name": wname, "ip": args.failover_ip.address})
