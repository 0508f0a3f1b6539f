"""Per-region SNI peer demux: a hostNetwork nginx on :7443 that routes TLS by SNI, and the
reconciler that keeps its routes in step with the cluster.

The routes come from the cluster (demux/): a per-region route reconciler watches the account peer
Services of the Kura namespace (by the labels kura-controller puts on them) and writes the nginx map
entries into the region's routes ConfigMap; each demux pod runs nginx under demux/nginx-reload.sh,
which reloads it gracefully when that ConfigMap changes. A new account is therefore a ConfigMap
update, not a deploy and not a roll. Only a change of the static nginx.conf or of the reload script
rolls the DaemonSet (its pod template carries their hash). TLS is never terminated: the peer plane
is mTLS end to end.

A roll keeps the peer plane (seed 000: the failover IP drains off a box whose demux is rolling):
one box at a time (maxUnavailable 1, no surge: hostNetwork ports), each new pod Ready for
minReadySeconds before the next box goes, and a preStop wait during which the old pod still serves
while the failover watcher, which treats a terminating demux pod as ineligible at once, moves the
IP to another box. See docs/peer-demux.md. Such a roll outlasts pulumi-kubernetes' default ten-minute
wait from a few boxes on, so the DaemonSet carries a `pulumi.com/timeoutSeconds` scaled to the fleet.
It has no PodDisruptionBudget: a drain (the machine provider's, as `kubectl drain`) leaves DaemonSet
pods alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pulumi

from components import kube as k8s
from components.gateway import TIMEOUT_ANNOTATION, roll_timeout_seconds
from components.k8s import (
    CONTROLLER_RESOURCES,
    child_options,
    config_hash,
    locked_down,
    metadata,
    pool_node_selector,
    pool_tolerations,
    prefer_off_pool,
    region_labels,
)
from config.models import Cluster, Environment, Fleet, Kura, Region
from demux.reconciler import FIELD_MANAGER
from demux.routes import ROUTES_KEY, RouteSettings, render_demux_config

__all__ = [
    "CONFIG_HASH_ANNOTATION",
    "DEMUX_CONNECTION_DRAIN_SECONDS",
    "PeerDemux",
    "PeerDemuxArgs",
    "demux_config",
    "demux_grace_seconds",
    "demux_labels",
    "demux_name",
    "route_settings",
    "routes_labels",
    "routes_name",
]

CONFIG_HASH_ANNOTATION = "tuist.dev/peer-demux-config-hash"
RELOAD_SCRIPT = Path(__file__).resolve().parent.parent / "demux" / "nginx-reload.sh"
FAILOVER_ADDRESS_SCRIPT = RELOAD_SCRIPT.with_name("failover-address.sh")

# Where the pod mounts what (demux/nginx-reload.sh reads these through its environment).
CONFIG_DIR = "/etc/kura-peer-demux/config"
ROUTES_DIR = "/etc/kura-peer-demux/routes"
RUN_DIR = "/run/kura-peer-demux"
ROUTES_FILE = f"{RUN_DIR}/routes.map"

# A stopping pod keeps serving `kura.demux_drain_seconds` (its preStop sleep; at least
# config.models.DEMUX_DRAIN_SECONDS outside dev): the failover watcher sees the terminating pod
# within one poll (5 s) and the vendor move (OVH /ip/move task, Dedibox attach) completes well within
# a minute, so the IP has left the box before nginx stops accepting. Then nginx drains open
# connections (SIGQUIT) this much longer. A new pod stays Ready `kura.demux_min_ready_seconds` before
# the next box's pod goes (the DaemonSet's minReadySeconds), so its box is eligible for the IP again
# before its neighbour drains.
DEMUX_CONNECTION_DRAIN_SECONDS = 60


def demux_grace_seconds(kura: Kura) -> int:
    """A demux pod's terminationGracePeriodSeconds: the preStop wait, then nginx's drain."""
    return kura.demux_drain_seconds + DEMUX_CONNECTION_DRAIN_SECONDS


def demux_name(region_id: str) -> str:
    return f"kura-peer-demux-{region_id}"


def routes_name(region_id: str) -> str:
    return f"kura-peer-demux-routes-{region_id}"


def demux_labels(region_id: str) -> dict[str, str]:
    # component=peer-demux + instance=<region> is the selector the failover watcher uses.
    return region_labels(name="kura-peer-demux", component="peer-demux", region=region_id)


def routes_labels(region_id: str) -> dict[str, str]:
    # Not component=peer-demux: these pods are no demux, and the watcher must never count them.
    return region_labels(name="kura-peer-demux", component="peer-demux-routes", region=region_id)


def route_settings(region: Region, kura: Kura, environment: Environment, cluster: Cluster) -> RouteSettings:
    return RouteSettings(
        region=region.id,
        region_host=region.host,
        namespace=kura.namespace,
        peer_port=kura.peer_port,
        cluster_domain=cluster.domain,
    )


def demux_config(kura: Kura, cluster: Cluster) -> dict[str, str]:
    """The static ConfigMap data: nginx.conf, the entrypoint that reloads it on new routes, and the
    init container's script that puts the failover IP on the box.

    The resolver is the cluster DNS Service IP (what every kubelet gets as clusterDNS), so nginx
    needs no name lookup to start."""
    return {
        "nginx.conf": render_demux_config(
            port=kura.peer_port, resolver=cluster.dns_service_ip, routes_file=ROUTES_FILE
        ),
        "nginx-reload.sh": RELOAD_SCRIPT.read_text(),
        "failover-address.sh": FAILOVER_ADDRESS_SCRIPT.read_text(),
    }


@dataclass(frozen=True)
class PeerDemuxArgs:
    region: Region
    fleet: Fleet
    kura: Kura
    environment: Environment
    cluster: Cluster
    # The image that runs `python -m demux` (the failover watcher's image carries the package).
    reconciler_image: str
    # The region's failover IP (None while parked): every box of the pool takes it as its own address.
    failover_address: str | None = None


def _failover_address_container(image: str, address: str | None) -> k8s.core.v1.ContainerArgs:
    """The vendors route the failover IP to the box; its kernel takes the packets only for an address
    of its own ("configured on every server it can be switched to", vendor-apis.md).
    demux/failover-address.sh puts it on lo as a /32 and removes the ones a changed or removed
    failover IP left; without an address (none configured) it only removes. Idempotent: the box
    keeps the address while it is in the pool."""
    return k8s.core.v1.ContainerArgs(
        name="failover-address",
        image=image,
        command=["/bin/sh", f"{CONFIG_DIR}/failover-address.sh", *([address] if address else [])],
        security_context=k8s.core.v1.SecurityContextArgs(
            capabilities=k8s.core.v1.CapabilitiesArgs(add=["NET_ADMIN"])
        ),
        resources=k8s.core.v1.ResourceRequirementsArgs(
            requests={"cpu": "10m", "memory": "16Mi"}, limits={"memory": "32Mi"}
        ),
        volume_mounts=[k8s.core.v1.VolumeMountArgs(name="config", mount_path=CONFIG_DIR, read_only=True)],
    )


class PeerDemux(pulumi.ComponentResource):
    """ConfigMaps + hostNetwork DaemonSet `kura-peer-demux-<region>` on the region's pool, and the
    route reconciler Deployment `kura-peer-demux-routes-<region>` with its namespaced RBAC."""

    config_hash: pulumi.Output[str]

    def __init__(self, name: str, args: PeerDemuxArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:peer_demux:PeerDemux", name, None, opts)
        region, kura, ns = args.region, args.kura, args.kura.namespace
        data = demux_config(kura, args.cluster)
        digest = config_hash("".join(f"{key}\0{data[key]}\0" for key in sorted(data)))
        labels = demux_labels(region.id)
        rlabels = routes_labels(region.id)
        child = child_options(self, opts)
        settings = route_settings(region, kura, args.environment, args.cluster)

        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config", metadata=metadata(demux_name(region.id), ns, labels), data=data, opts=child
        )
        # The reconciler owns this ConfigMap's data (server-side apply, its own field manager);
        # the program creates it so the reconciler needs no create permission, and never sends data.
        self.routes = k8s.core.v1.ConfigMap(
            f"{name}-routes",
            metadata=metadata(
                routes_name(region.id),
                ns,
                rlabels,
                annotations={"tuist.dev/data-owner": f"field manager {FIELD_MANAGER} (python -m demux)"},
            ),
            opts=child_options(self, opts, ignore_changes=["data"]),
        )
        # `pulumi up` waits for the roll: one box at a time, each up to its grace, its start and its
        # minReadySeconds. A parked fleet has no box to roll.
        timeout = roll_timeout_seconds(
            args.fleet.size if args.fleet.enabled else 0,
            grace_seconds=demux_grace_seconds(kura),
            min_ready_seconds=kura.demux_min_ready_seconds,
        )
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=metadata(
                demux_name(region.id), ns, labels, annotations={TIMEOUT_ANNOTATION: str(timeout)}
            ),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                # One box at a time, no surge (the new pod needs the old one's :7443), and a new
                # pod proves itself Ready for a while before the next box drains.
                update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=k8s.apps.v1.RollingUpdateDaemonSetArgs(max_unavailable=1, max_surge=0),
                ),
                min_ready_seconds=args.kura.demux_min_ready_seconds,
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=labels, annotations={CONFIG_HASH_ANNOTATION: digest}
                    ),
                    spec=self._pod_spec(args, settings),
                ),
            ),
            opts=child_options(self, opts, depends_on=[self.config_map, self.routes]),
        )
        self._reconciler(name, args, settings, rlabels, opts)
        self.config_hash = pulumi.Output.from_input(digest)
        self.register_outputs(
            {"name": demux_name(region.id), "config_hash": digest, "routes": routes_name(region.id)}
        )

    @staticmethod
    def _pod_spec(args: PeerDemuxArgs, settings: RouteSettings) -> k8s.core.v1.PodSpecArgs:
        kura, region = args.kura, args.region
        env = {
            "NGINX_CONF": f"{CONFIG_DIR}/nginx.conf",
            "ROUTES_SOURCE": f"{ROUTES_DIR}/{ROUTES_KEY}",
            "ROUTES_FILE": ROUTES_FILE,
        }
        address = args.failover_address
        return k8s.core.v1.PodSpecArgs(
            host_network=True,
            dns_policy="ClusterFirstWithHostNet",
            init_containers=[_failover_address_container(kura.demux_image, address)],
            node_selector=pool_node_selector(args.fleet),
            tolerations=pool_tolerations(args.fleet),
            termination_grace_period_seconds=demux_grace_seconds(kura),
            containers=[
                k8s.core.v1.ContainerArgs(
                    name="nginx",
                    image=kura.demux_image,
                    command=["/bin/sh", f"{CONFIG_DIR}/nginx-reload.sh"],
                    env=[k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()],
                    ports=[
                        k8s.core.v1.ContainerPortArgs(
                            name="peer", container_port=kura.peer_port, protocol="TCP"
                        )
                    ],
                    # On the failover IP when there is one: Ready (and so eligible for the IP) only on a
                    # box that answers on it.
                    readiness_probe=k8s.core.v1.ProbeArgs(
                        tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=kura.peer_port, host=address),
                        initial_delay_seconds=5,
                        period_seconds=10,
                    ),
                    lifecycle=k8s.core.v1.LifecycleArgs(
                        pre_stop=k8s.core.v1.LifecycleHandlerArgs(
                            sleep=k8s.core.v1.SleepActionArgs(seconds=kura.demux_drain_seconds)
                        )
                    ),
                    resources=k8s.core.v1.ResourceRequirementsArgs(
                        requests={"cpu": "50m", "memory": "64Mi"},
                        limits={"memory": "256Mi"},
                    ),
                    volume_mounts=[
                        k8s.core.v1.VolumeMountArgs(name="config", mount_path=CONFIG_DIR, read_only=True),
                        # A directory mount (no subPath), so the kubelet swaps in new routes.
                        k8s.core.v1.VolumeMountArgs(name="routes", mount_path=ROUTES_DIR, read_only=True),
                        k8s.core.v1.VolumeMountArgs(name="run", mount_path=RUN_DIR),
                    ],
                )
            ],
            volumes=[
                k8s.core.v1.VolumeArgs(
                    name="config",
                    config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=demux_name(region.id)),
                ),
                k8s.core.v1.VolumeArgs(
                    name="routes",
                    config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                        name=routes_name(region.id), optional=True
                    ),
                ),
                k8s.core.v1.VolumeArgs(
                    name="run",
                    empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(medium="Memory", size_limit="1Mi"),
                ),
            ],
        )

    def _reconciler(
        self,
        name: str,
        args: PeerDemuxArgs,
        settings: RouteSettings,
        labels: dict[str, str],
        opts: pulumi.ResourceOptions | None,
    ) -> None:
        ns, rname = args.kura.namespace, routes_name(args.region.id)
        child = child_options(self, opts)
        self.reconciler_account = k8s.core.v1.ServiceAccount(
            f"{name}-routes-sa", metadata=metadata(rname, ns, labels), opts=child
        )
        # Least privilege: read the Services of the Kura namespace, write this one ConfigMap. The
        # reconciler lists by label selector, which RBAC cannot narrow: the read covers the namespace.
        self.reconciler_role = k8s.rbac.v1.Role(
            f"{name}-routes-role",
            metadata=metadata(rname, ns, labels),
            rules=[
                k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["services"], verbs=["list", "watch"]),
                k8s.rbac.v1.PolicyRuleArgs(
                    api_groups=[""], resources=["configmaps"], resource_names=[rname], verbs=["get", "patch"]
                ),
            ],
            opts=child,
        )
        self.reconciler_binding = k8s.rbac.v1.RoleBinding(
            f"{name}-routes-rolebinding",
            metadata=metadata(rname, ns, labels),
            role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=rname),
            subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=rname, namespace=ns)],
            opts=child,
        )
        env = {**settings.to_env(), "ROUTES_CONFIGMAP": rname}
        self.reconciler = k8s.apps.v1.Deployment(
            f"{name}-routes-deployment",
            metadata=metadata(rname, ns, labels),
            spec=k8s.apps.v1.DeploymentSpecArgs(
                replicas=1,
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels),
                    spec=k8s.core.v1.PodSpecArgs(
                        service_account_name=rname,
                        # Off the boxes it routes for: a lost box must not also take the reconciler.
                        affinity=prefer_off_pool(args.fleet),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="reconciler",
                                image=args.reconciler_image,
                                command=["python", "-m", "demux"],
                                env=[k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in env.items()],
                                resources=CONTROLLER_RESOURCES,
                                security_context=locked_down(),
                            )
                        ],
                    ),
                ),
            ),
            opts=child_options(self, opts, depends_on=[self.routes, self.reconciler_binding]),
        )
