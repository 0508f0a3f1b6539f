"""One Kura cache region on its fleet's pool: gateway, peer demux (with its route reconciler),
DNS records (with the public plane's reconciler), the failover watcher, the local volumes Kura's
claims bind to and, for a region that scrubs them, the released-volume scrubber.

What kura-controller is told about the region (pool, taints, storage, egress, replicas) is part of
its Deployment's environment (components/kura_controller.py), one controller for every region.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi

from components.dns import DnsRecords, DnsRecordsArgs
from components.dns_reconciler import DnsReconciler, DnsReconcilerArgs
from components.failover_watcher import FailoverWatcher, FailoverWatcherArgs
from components.gateway import Gateway, GatewayArgs
from components.k8s import child_options
from components.kura_controller import region_exposed, routed_failover_address
from components.peer_demux import PeerDemux, PeerDemuxArgs
from components.storage import LocalVolumes, LocalVolumesArgs
from components.volume_scrubber import VolumeScrubber, VolumeScrubberArgs
from config.loader import Secrets
from config.models import (
    Cluster,
    Environment,
    FailoverIP,
    Fleet,
    GatewayMode,
    Kura,
    Region,
    ReleasedVolumes,
    Vendors,
)

__all__ = ["KuraRegion", "KuraRegionArgs"]


@dataclass(frozen=True)
class KuraRegionArgs:
    region: Region
    fleet: Fleet
    failover_ip: FailoverIP | None
    kura: Kura
    environment: Environment
    cluster: Cluster
    # Image that runs `python -m watcher`, `python -m demux` (the demux's route reconciler),
    # `python -m regional_dns` (the public DNS reconciler) and `python -m watcher.released_volumes`.
    watcher_image: str
    # Node names of the fleet's boxes (BareMetalFleet outputs): each gets the region's local volumes.
    node_names: Sequence[pulumi.Input[str]] = field(default_factory=tuple)
    # The stack's vendor accounts and secrets: the watcher gets its IP's vendor's share of them.
    vendors: Vendors = field(default_factory=Vendors)
    secrets: Secrets = field(default_factory=Secrets)
    # The stack's watchers of Robot IPs (failover_watcher.robot_failover_watchers): one shared budget.
    robot_failover_watchers: int = 1


def _check(args: KuraRegionArgs) -> None:
    region, fleet, fip = args.region, args.fleet, args.failover_ip
    if region.fleet != fleet.name:
        raise ValueError(
            f"regions['{region.id}'].fleet is '{region.fleet}' but fleet '{fleet.name}' was passed"
        )
    if fip is not None:
        if region.failover_ip != fip.name:
            raise ValueError(
                f"regions['{region.id}'].failover_ip is {region.failover_ip!r} but '{fip.name}' was passed"
            )
        if fip.fleet != fleet.name:
            raise ValueError(
                f"failover_ips['{fip.name}'].fleet is '{fip.fleet}', not the region's fleet '{fleet.name}'"
            )


class KuraRegion(pulumi.ComponentResource):
    id: pulumi.Output[str]
    cluster_id: pulumi.Output[str]
    host: pulumi.Output[str]
    peer_host: pulumi.Output[str]
    failover_ip: pulumi.Output[str | None]
    node_pool: pulumi.Output[str]
    exposed: pulumi.Output[bool]
    gateway_mode: pulumi.Output[str]
    private: pulumi.Output[bool]
    node_ports: pulumi.Output[dict[str, int] | None]

    def __init__(self, name: str, args: KuraRegionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:kura_region:KuraRegion", name, None, opts)
        _check(args)
        region, fleet, kura, fip = args.region, args.fleet, args.kura, args.failover_ip
        ns = kura.namespace
        child = child_options(self, opts)
        address = routed_failover_address(fip, fleet)

        self.gateway = Gateway(
            f"{name}-gateway",
            GatewayArgs(
                region=region,
                fleet=fleet,
                namespace=ns,
                image=kura.gateway_image,
                drain_seconds=kura.gateway_drain_seconds,
                min_ready_seconds=kura.gateway_min_ready_seconds,
            ),
            child,
        )
        self.peer_demux = PeerDemux(
            f"{name}-demux",
            PeerDemuxArgs(
                region=region,
                fleet=fleet,
                kura=kura,
                environment=args.environment,
                cluster=args.cluster,
                reconciler_image=args.watcher_image,
                failover_address=address,
            ),
            child,
        )
        # A private region has no public entry: its clients reach it over their Private Network.
        # The public wildcard follows the boxes whose host-network gateway serves, at runtime.
        public = not region.private and region.gateway is GatewayMode.HOST_NETWORK
        self.dns: DnsRecords | None = None
        self.dns_reconciler: DnsReconciler | None = None
        if not region.private:
            self.dns = DnsRecords(
                f"{name}-dns",
                DnsRecordsArgs(
                    region_id=region.id,
                    host=region.host,
                    namespace=ns,
                    failover_address=address,
                    public=public,
                ),
                child,
            )
        if public:
            self.dns_reconciler = DnsReconciler(
                f"{name}-dns-reconciler",
                DnsReconcilerArgs(region=region, fleet=fleet, namespace=ns, image=args.watcher_image),
                child,
            )
        self.volumes = LocalVolumes(
            f"{name}-volumes", LocalVolumesArgs(region=region, node_names=args.node_names), child
        )
        self.volume_scrubber: VolumeScrubber | None = None
        if region.released_volumes is ReleasedVolumes.SCRUB:
            self.volume_scrubber = VolumeScrubber(
                f"{name}-released-volumes",
                VolumeScrubberArgs(
                    region=region,
                    fleet=fleet,
                    namespace=ns,
                    image=args.watcher_image,
                    volume_names=self.volumes.names,
                ),
                child,
            )
        self.failover_watcher: FailoverWatcher | None = None
        if fip is not None and address is not None:
            self.failover_watcher = FailoverWatcher(
                f"{name}-watcher",
                FailoverWatcherArgs(
                    region=region,
                    fleet=fleet,
                    failover_ip=fip,
                    namespace=ns,
                    image=args.watcher_image,
                    vendors=args.vendors,
                    ovh_application_secret=args.secrets.ovh_application_secret,
                    ovh_consumer_key=args.secrets.ovh_consumer_key,
                    dedibox_secret_key=args.secrets.dedibox_secret_key,
                    robot_password=args.secrets.robot_password,
                    robot_failover_watchers=args.robot_failover_watchers,
                ),
                child,
            )

        exposed = region_exposed(region, fleet)
        self.id = pulumi.Output.from_input(region.id)
        self.cluster_id = pulumi.Output.from_input(region.cluster_id)
        self.host = pulumi.Output.from_input(region.host)
        self.peer_host = pulumi.Output.from_input(f"peer.{region.host}")
        self.failover_ip = pulumi.Output.from_input(address)
        self.node_pool = pulumi.Output.from_input(fleet.node_pool)
        self.exposed = pulumi.Output.from_input(exposed)
        self.gateway_mode = pulumi.Output.from_input(region.gateway.value)
        self.private = pulumi.Output.from_input(region.private)
        pinned = region.gateway_node_ports
        node_ports = pinned.model_dump() if pinned else None
        self.node_ports = pulumi.Output.from_input(node_ports)
        self.register_outputs(
            {
                "id": region.id,
                "cluster_id": region.cluster_id,
                "host": region.host,
                "peer_host": f"peer.{region.host}",
                "failover_ip": address,
                "node_pool": fleet.node_pool,
                "exposed": exposed,
                "gateway_mode": region.gateway.value,
                "private": region.private,
                "node_ports": node_ports,
            }
        )
