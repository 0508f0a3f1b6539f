"""One region's public DNS reconciler (`python -m regional_dns`): its Deployment, ServiceAccount and
least-privilege RBAC.

It runs beside external-dns in `<kura namespace>-dns`, out of the Kura namespace whose gateways read
every Secret, because what it can do is DNS: rewrite the region's public wildcard. Its rights are what
one pass reads and writes (regional_dns/reconciler.py): list the pool's Nodes (a ClusterRole), and in
the Kura namespace list pods, get the region's gateway Deployment, get and patch (server-side apply)
the region's public DNSEndpoint, each by name. It cannot create or delete a DNSEndpoint: the program
creates that object (components/dns.py), the reconciler owns only its spec.endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi

from components import kube as k8s
from components.dns import regional_dns_name
from components.external_dns import DNSENDPOINT_GROUP, dns_namespace
from components.gateway import gateway_name
from components.k8s import (
    CONTROLLER_RESOURCES,
    bound_cluster_role,
    bound_role,
    child_options,
    heartbeat_probe,
    heartbeat_volume,
    locked_down,
    metadata,
    prefer_off_pool,
    region_labels,
)
from config.models import Fleet, Region
from regional_dns.reconciler import Settings

__all__ = [
    "DnsReconciler",
    "DnsReconcilerArgs",
    "dns_reconciler_name",
    "dns_reconciler_rules",
    "reconciler_settings",
]

RUN_DIR = "/run/regional-dns"  # an emptyDir: the root filesystem is read-only


def dns_reconciler_name(region_id: str) -> str:
    return f"kura-regional-dns-{region_id}"


def reconciler_settings(region: Region, fleet: Fleet, namespace: str) -> Settings:
    return Settings(
        region=region.id,
        host=region.host,
        namespace=namespace,
        gateway=gateway_name(region.id),
        node_pool=fleet.node_pool,
        dnsendpoint=regional_dns_name(region.id),
        heartbeat_file=f"{RUN_DIR}/heartbeat",
    )


def dns_reconciler_rules(region_id: str) -> list[k8s.rbac.v1.PolicyRuleArgs]:
    """Its Role in the Kura namespace."""
    rule = k8s.rbac.v1.PolicyRuleArgs
    return [
        rule(api_groups=[""], resources=["pods"], verbs=["list"]),
        rule(
            api_groups=["apps"],
            resources=["deployments"],
            resource_names=[gateway_name(region_id)],
            verbs=["get"],
        ),
        rule(
            api_groups=[DNSENDPOINT_GROUP],
            resources=["dnsendpoints"],
            resource_names=[regional_dns_name(region_id)],
            verbs=["get", "patch"],
        ),
    ]


@dataclass(frozen=True)
class DnsReconcilerArgs:
    region: Region
    fleet: Fleet
    namespace: str  # the Kura namespace: the gateway pods and the DNSEndpoint
    # The image that runs `python -m regional_dns` (the failover watcher's image carries the package).
    image: str


class DnsReconciler(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: DnsReconcilerArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tuist:dns_reconciler:DnsReconciler", name, None, opts)
        region, ns = args.region, args.namespace
        home, rname = dns_namespace(ns), dns_reconciler_name(region.id)
        labels = region_labels(name="kura-regional-dns", component="regional-dns", region=region.id)
        settings = reconciler_settings(region, args.fleet, ns)
        child = child_options(self, opts)
        subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=rname, namespace=home)

        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa", metadata=metadata(rname, home, labels), opts=child
        )
        self.cluster_role, self.cluster_role_binding = bound_cluster_role(
            name,
            role_name=rname,
            labels=labels,
            rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["list"])],
            subject=subject,
            opts=child,
        )
        self.role, self.role_binding = bound_role(
            name,
            role_name=rname,
            namespace=ns,
            labels=labels,
            rules=dns_reconciler_rules(region.id),
            subject=subject,
            opts=child,
        )
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=metadata(rname, home, labels),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                # One writer of the region's records at a time.
                strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=rname,
                        security_context=k8s.core.v1.PodSecurityContextArgs(
                            seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault")
                        ),
                        volumes=[heartbeat_volume()],
                        # Off the boxes it publishes: losing one must not also take the process that
                        # withdraws it.
                        affinity=prefer_off_pool(args.fleet),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="reconciler",
                                image=args.image,
                                command=["python", "-m", "regional_dns"],
                                env=[
                                    k8s.core.v1.EnvVarArgs(name=k, value=v)
                                    for k, v in settings.to_env().items()
                                ],
                                volume_mounts=[k8s.core.v1.VolumeMountArgs(name="run", mount_path=RUN_DIR)],
                                # Each pass promises the time of the next (regional_dns/reconciler.py): a
                                # reconciler hung on a call that never returns misses it and is restarted.
                                liveness_probe=heartbeat_probe(RUN_DIR),
                                resources=CONTROLLER_RESOURCES,
                                security_context=locked_down(),
                            )
                        ],
                    ),
                ),
            ),
            # A replacement goes after the old one is gone: never two writers, even for an up.
            opts=child_options(
                self,
                opts,
                depends_on=[self.role_binding, self.cluster_role_binding],
                delete_before_replace=True,
            ),
        )
        self.register_outputs({"name": rname, "namespace": home, "dnsendpoint": settings.dnsendpoint})
