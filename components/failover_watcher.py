"""Deployment, ServiceAccount, least-privilege RBAC and vendor credentials of one region's
failover watcher.

The watcher (package `watcher`, run as `python -m watcher`) reads Nodes cluster-wide and
lists the region's demux pods in the Kura namespace; it needs nothing else from the API.
Its vendor credentials (only those of the region's vendor) are a Secret mounted read-only
as files (watcher/mover.py reads them per call, so a rotation needs no restart), never
environment variables: env leaks into `kubectl describe`, crash dumps and child processes.
The watcher, its ServiceAccount and that Secret live in `<kura namespace>-failover`, not in the
Kura namespace, whose gateways read every Secret; a Role there lets it list the demux pods.
It moves the IP only while it holds the region's Lease in its own namespace (watcher/lease.py), which
a second Role lets it create and write: that Lease, by name, and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi

from components import kube as k8s
from components.k8s import (
    CONTROLLER_RESOURCES,
    NONROOT_UID,
    bound_role,
    child_options,
    heartbeat_probe,
    heartbeat_volume,
    locked_down,
    metadata,
    pod_field_env,
    prefer_off_pool,
    region_labels,
)
from config.models import FailoverIP, Fleet, Region, Vendor, Vendors, robot_failover_regions
from providers.clients import SECRET_KEYS_BY_VENDOR
from watcher.loop import MOVE_BUDGET_SECONDS, POLL_BUDGET_SECONDS
from watcher.mover import (
    DEFAULT_CREDENTIALS_DIR,
    ENV_ACCOUNT,
    ENV_CREDENTIALS_DIR,
    ENV_VENDOR,
)

__all__ = [
    "CREDENTIALS_SECRET",
    "FailoverWatcher",
    "FailoverWatcherArgs",
    "credentials_secret_name",
    "robot_failover_watchers",
    "watcher_name",
]

CREDENTIALS_SECRET = "tuist-failover-vendor-credentials"
RUN_DIR = "/run/watcher"  # an emptyDir: the root filesystem is read-only


def watcher_name(region_id: str) -> str:
    return f"kura-failover-watcher-{region_id}"


def credentials_secret_name(region_id: str) -> str:
    # Per region: regions share the Kura namespace and may be on different vendors.
    return f"{CREDENTIALS_SECRET}-{region_id}"


def failover_namespace(kura_namespace: str) -> str:
    """The namespace of the regions' failover watchers and their vendor credentials."""
    return f"{kura_namespace}-failover"


def robot_failover_watchers(
    regions: Sequence[Region], failover_ips: Sequence[FailoverIP], account_watchers: int | None = None
) -> int:
    """How many watchers poll the Robot account: this stack's own (one per region whose failover IP is
    a routed Robot IP), or the account's across stacks (vendors.robot.failover_watchers) when that is
    more. They share the account's hourly GET /failover/{ip} budget, so each one reads its route that
    much less often (watcher/__main__.py, docs/vendor-behaviour.md section 5). At least 1."""
    return max(1, len(robot_failover_regions(regions, failover_ips)), account_watchers or 0)


@dataclass(frozen=True)
class FailoverWatcherArgs:
    region: Region
    fleet: Fleet
    failover_ip: FailoverIP
    namespace: str  # the Kura namespace: the demux pods it lists
    image: str
    # The stack's vendor accounts; the watcher gets the non-secret settings of the IP's vendor.
    vendors: Vendors
    # The stack secrets (config.loader.Secrets); only the IP's vendor's are required and used.
    ovh_application_secret: pulumi.Input[str] | None = None
    ovh_consumer_key: pulumi.Input[str] | None = None
    dedibox_secret_key: pulumi.Input[str] | None = None
    robot_password: pulumi.Input[str] | None = None
    credentials_dir: str = DEFAULT_CREDENTIALS_DIR
    # A short poll: a terminating demux pod makes its box ineligible at once (watcher/decision.py),
    # and the IP must leave within the demux's preStop drain (components/peer_demux.py).
    poll_seconds: int = 5
    confirm_polls: int = 2
    # The stack's watchers of Robot IPs (robot_failover_watchers): they share one request budget.
    robot_failover_watchers: int = 1

    def vendor_credentials(self) -> dict[str, pulumi.Input[str] | None]:
        """The IP's vendor's secrets by stack key (the Secret's keys, the mounted file names)."""
        by_key = {
            "ovhApplicationSecret": self.ovh_application_secret,
            "ovhConsumerKey": self.ovh_consumer_key,
            "dediboxSecretKey": self.dedibox_secret_key,
            "robotPassword": self.robot_password,
        }
        return {key: by_key[key] for key in SECRET_KEYS_BY_VENDOR[self.failover_ip.vendor]}


class FailoverWatcher(pulumi.ComponentResource):
    def __init__(
        self, name: str, args: FailoverWatcherArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__("tuist:failover_watcher:FailoverWatcher", name, None, opts)
        fip = args.failover_ip
        if fip.address is None:
            raise ValueError(f"failover_ips '{fip.name}' is parked; a watcher needs an address")
        account = getattr(args.vendors, fip.vendor.value)
        if account is None:
            raise ValueError(
                f"failover_ips '{fip.name}' is on {fip.vendor.value}, but vendors.{fip.vendor.value} "
                "is not set"
            )
        credentials = args.vendor_credentials()
        missing = [key for key, value in credentials.items() if value is None]
        if missing:
            raise ValueError(
                f"failover watcher of region '{args.region.id}': the {fip.vendor.value} secret(s) "
                f"{', '.join(missing)} were not passed (FailoverWatcherArgs); the watcher cannot move the IP"
            )
        region, ns = args.region, args.namespace
        # Not the Kura namespace: its gateways (ingress-nginx, facing the internet) read every Secret
        # there, and these credentials can reinstall the vendor's boxes.
        home = failover_namespace(ns)
        wname = watcher_name(region.id)
        labels = region_labels(name="kura-failover-watcher", component="failover-watcher", region=region.id)
        child = child_options(self, opts)
        subject = k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=wname, namespace=home)

        self.service_account = k8s.core.v1.ServiceAccount(
            f"{name}-sa",
            metadata=metadata(wname, home, labels),
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
        self.role, self.role_binding = bound_role(
            name,
            role_name=wname,
            namespace=ns,
            labels=labels,
            rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["list"])],
            subject=subject,
            opts=child,
        )
        # Create cannot be limited by name (the object does not exist yet); the rest is this Lease alone.
        self.lease_role, self.lease_role_binding = bound_role(
            f"{name}-lease",
            role_name=f"{wname}-lease",
            namespace=home,
            labels=labels,
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=["coordination.k8s.io"], resources=["leases"], verbs=["create"]
                ),
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=["coordination.k8s.io"],
                    resources=["leases"],
                    resource_names=[wname],
                    verbs=["get", "update"],
                ),
            ],
            subject=subject,
            opts=child,
        )
        secret_name = credentials_secret_name(region.id)
        self.credentials = k8s.core.v1.Secret(
            f"{name}-credentials",
            metadata=metadata(secret_name, home, labels),
            type="Opaque",
            # Output.secret, whatever the caller passed: encrypted in state, masked in diffs.
            string_data={
                key: pulumi.Output.secret(value) for key, value in credentials.items() if value is not None
            },
            opts=child,
        )
        env = {
            "FAILOVER_IP": fip.address,
            ENV_VENDOR: fip.vendor.value,
            ENV_ACCOUNT: account.model_dump_json(),
            ENV_CREDENTIALS_DIR: args.credentials_dir,
            "REGION": region.id,
            "NODE_POOL": args.fleet.node_pool,
            "KURA_NAMESPACE": ns,
            "POLL_SECONDS": str(args.poll_seconds),
            "CONFIRM_POLLS": str(args.confirm_polls),
            "HEARTBEAT_FILE": f"{RUN_DIR}/heartbeat",
            "LEASE_NAME": wname,
            "LEASE_NAMESPACE": home,
        }
        if fip.vendor is Vendor.ROBOT:
            if args.robot_failover_watchers < 1:
                raise ValueError(
                    f"failover watcher of region '{region.id}': robot_failover_watchers must be >= 1, "
                    f"got {args.robot_failover_watchers}"
                )
            env["ROBOT_FAILOVER_WATCHERS"] = str(args.robot_failover_watchers)
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata=metadata(wname, home, labels),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                # Never two watchers at once: they could issue opposing moves.
                strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=wname,
                        # The credential files belong to this group, readable by the non-root user.
                        security_context=k8s.core.v1.PodSecurityContextArgs(fs_group=NONROOT_UID),
                        volumes=[
                            k8s.core.v1.VolumeArgs(
                                name="vendor-credentials",
                                secret=k8s.core.v1.SecretVolumeSourceArgs(
                                    secret_name=secret_name, default_mode=0o440
                                ),
                            ),
                            heartbeat_volume(),
                        ],
                        # Off the pool it guards: losing that box must not also take down the one
                        # process that moves the IP off it.
                        affinity=prefer_off_pool(args.fleet),
                        # SIGTERM ends the loop after its current poll; a move in flight (a Dedibox
                        # detach, then attach) must not be killed between its two halves.
                        termination_grace_period_seconds=int(POLL_BUDGET_SECONDS + MOVE_BUDGET_SECONDS),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="watcher",
                                image=args.image,
                                command=["python", "-m", "watcher"],
                                env=[
                                    *(k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()),
                                    # Its identity in the Lease: a restarted container takes it back.
                                    pod_field_env("POD_NAME", "metadata.name"),
                                ],
                                volume_mounts=[
                                    k8s.core.v1.VolumeMountArgs(
                                        name="vendor-credentials",
                                        mount_path=args.credentials_dir,
                                        read_only=True,
                                    ),
                                    k8s.core.v1.VolumeMountArgs(name="run", mount_path=RUN_DIR),
                                ],
                                # The loop writes, before each poll and each wait, the time by which
                                # it will write again (watcher/loop.py): a watcher hung on a call
                                # that never returns misses it and is restarted.
                                liveness_probe=heartbeat_probe(RUN_DIR),
                                resources=CONTROLLER_RESOURCES,
                                security_context=locked_down(NONROOT_UID),
                            )
                        ],
                    ),
                ),
            ),
            # A replacement (another namespace, as when the watchers left the Kura namespace) goes
            # after the old one is gone: never two watchers at once, even for the length of an up.
            opts=child_options(self, opts, depends_on=[self.credentials], delete_before_replace=True),
        )
        self.register_outputs({"name": wname, "ip": fip.address})
