"""One Kura cache region on its fleet's pool: gateway, peer demux, DNS, failover watcher
and the kura-controller settings for a direct pod-to-pod peer plane.

The settings are one ConfigMap per region (`kura-controller-<region>`), not one shared
object: each region has its own pool, taints, storage and egress numbers, and a
per-region object lets a region change (or be removed) without touching the others.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from components.dns import DnsRecords, DnsRecordsArgs
from components.failover_watcher import FailoverWatcher, FailoverWatcherArgs
from components.gateway import Gateway, GatewayArgs
from components.k8s import env_suffix, metadata, pool_node_selector, region_labels
from components.peer_demux import KURA_PUBLIC_ZONE, PeerDemux, PeerDemuxArgs
from config.loader import Secrets
from config.models import Environment, FailoverIP, Fleet, Kura, Region, Vendors

__all__ = [
    "EGRESS_BANDWIDTH_ANNOTATION",
    "EGRESS_FLOOR_RESOURCE",
    "KuraRegion",
    "KuraRegionArgs",
    "available_regions",
    "kura_controller_settings",
    "region_exposed",
]

EGRESS_FLOOR_RESOURCE = "tuist.dev/egress-mbps"
EGRESS_BANDWIDTH_ANNOTATION = "kubernetes.io/egress-bandwidth"


def region_exposed(region: Region, fleet: Fleet) -> bool:
    """Exposed when config says so and the fleet can have a box: a parked or empty
    fleet would advertise a region that serves nothing."""
    return region.exposed and fleet.enabled and fleet.size > 0


def available_regions(pairs: Sequence[tuple[Region, Fleet]]) -> str:
    """TUIST_KURA_AVAILABLE_REGIONS: the exposed region ids, comma-separated, config order."""
    return ",".join(region.id for region, fleet in pairs if region_exposed(region, fleet))


def kura_controller_settings(
    region: Region, fleet: Fleet, kura: Kura, environment: Environment
) -> dict[str, str]:
    """What kura-controller reads to place this region's Kura instances.

    `{account}` is filled in per account by kura-controller. Discovery is Local scope
    only: KURA_DISCOVERY_DNS_NAME names the account peer Service, so peers dial each
    other pod to pod; there is deliberately no global discovery name.
    """
    tolerations = [
        {"key": t.key, "operator": "Equal" if t.value else "Exists", "effect": t.effect.value}
        | ({"value": t.value} if t.value else {})
        for t in fleet.taints
    ]
    cluster_suffix = f"{region.cluster_id}{env_suffix(environment)}"
    return {
        "KURA_REGION": region.id,
        "KURA_CLUSTER_ID": region.cluster_id,
        "KURA_REGION_HOST": region.host,
        "KURA_REGION_EXPOSED": json.dumps(region_exposed(region, fleet)),
        "KURA_GATEWAY_MODE": region.gateway.value,
        "KURA_INGRESS_CLASS": region.ingress_class,
        "KURA_RUNTIME_IMAGE": f"{kura.runtime_image}:{kura.runtime_image_tag}",
        "KURA_REPLICAS": str(region.replicas),
        "KURA_STORAGE_CLASS": region.storage_class,
        "KURA_STORAGE_SIZE": f"{region.storage_size_gi}Gi",
        "KURA_DISCOVERY_DNS_NAME": f"kura-{{account}}-peer.{kura.namespace}.svc.cluster.local",
        "KURA_MESH_PEER_HOST_NETWORK": "true",
        "KURA_PEER_PORT": str(kura.peer_port),
        "KURA_PUBLIC_PEER_SERVICE": f"kura-{{account}}-{region.id}-peer",
        "KURA_PUBLIC_PEER_HOST": f"peer.{{account}}-{cluster_suffix}.{KURA_PUBLIC_ZONE}",
        "KURA_TMP_DIR_MAX_BYTES": str(kura.bootstrap_tmp_dir_max_bytes),
        "KURA_BOOTSTRAP_MAX_CONCURRENT_PEERS": str(kura.bootstrap_max_concurrent_peers),
        "KURA_BOOTSTRAP_ARTIFACT_CONCURRENCY": str(kura.bootstrap_artifact_concurrency),
        "KURA_POD_RESOURCE_REQUESTS": json.dumps({EGRESS_FLOOR_RESOURCE: str(region.egress_floor_mbps)}),
        "KURA_POD_ANNOTATIONS": json.dumps({EGRESS_BANDWIDTH_ANNOTATION: f"{region.egress_burst_mbps}M"}),
        "KURA_NODE_SELECTOR": json.dumps(pool_node_selector(fleet)),
        "KURA_TOLERATIONS": json.dumps(tolerations),
    }


@dataclass(frozen=True)
class KuraRegionArgs:
    region: Region
    fleet: Fleet
    failover_ip: FailoverIP | None
    kura: Kura
    environment: Environment
    # Public IPv4s of the fleet's boxes (BareMetalFleet outputs) for the public wildcard.
    public_ipv4s: pulumi.Input[Sequence[pulumi.Input[str]]] = field(default_factory=tuple)
    # Image that runs `python -m watcher`; required when the region has a routed failover IP.
    watcher_image: str | None = None
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
        if not fip.parked and args.watcher_image is None:
            raise ValueError(
                f"regions['{region.id}']: failover IP '{fip.name}' is routed but no watcher_image was given "
                "to run its failover watcher"
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

    def __init__(self, name: str, args: KuraRegionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:kura_region:KuraRegion", name, None, opts)
        _check(args)
        region, fleet, kura, fip = args.region, args.fleet, args.kura, args.failover_ip
        ns = kura.namespace
        child = pulumi.ResourceOptions(parent=self)
        address = fip.address if fip is not None else None

        self.gateway = Gateway(
            f"{name}-gateway", GatewayArgs(region=region, fleet=fleet, namespace=ns), child
        )
        self.peer_demux = PeerDemux(
            f"{name}-demux",
            PeerDemuxArgs(region=region, fleet=fleet, kura=kura, environment=args.environment),
            child,
        )
        self.dns = DnsRecords(
            f"{name}-dns",
            DnsRecordsArgs(
                region_id=region.id,
                host=region.host,
                namespace=ns,
                failover_address=address,
                account_peer_hosts=[r.host for r in self.peer_demux.routes],
                public_ipv4s=args.public_ipv4s,
            ),
            child,
        )
        self.failover_watcher: FailoverWatcher | None = None
        if fip is not None and address is not None:
            assert args.watcher_image is not None  # _check refuses a routed IP without one
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
        self.controller_settings = k8s.core.v1.ConfigMap(
            f"{name}-controller-settings",
            metadata=metadata(
                f"kura-controller-{region.id}",
                ns,
                region_labels(name="kura-controller", component="region-settings", region=region.id),
            ),
            data=kura_controller_settings(region, fleet, kura, args.environment),
            opts=child,
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
            }
        )
