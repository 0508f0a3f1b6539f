"""Per-region SNI peer demux: a hostNetwork nginx on :7443 that routes TLS by SNI.

Routes are explicit: one map entry per account listed in `kura.accounts`, from the
account's public peer host to its peer Service in the Kura namespace. Anything else,
including any SNI that is not exactly one of those hosts, maps to "" and nginx closes
the connection. TLS is never terminated (the peer plane is mTLS end to end).
See docs/peer-demux.md for why the map is explicit rather than a regex.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import (
    config_hash,
    env_suffix,
    metadata,
    pool_node_selector,
    pool_tolerations,
    region_labels,
)
from config.models import Environment, Fleet, Kura, Region

__all__ = [
    "CONFIG_HASH_ANNOTATION",
    "DEMUX_IMAGE",
    "DEMUX_PORT",
    "PeerDemux",
    "PeerDemuxArgs",
    "PeerRoute",
    "account_peer_host",
    "demux_labels",
    "demux_name",
    "peer_routes",
    "peer_service_name",
    "render_demux_config",
]

DEMUX_IMAGE = "nginx:1.27.3-alpine"
DEMUX_PORT = 7443
CONFIG_HASH_ANNOTATION = "tuist.dev/peer-demux-config-hash"
# nginx needs a resolver to look backends up per connection; a name is resolved once at
# startup through the pod's resolv.conf (ClusterFirstWithHostNet), so no IP is hard-coded.
CLUSTER_RESOLVER = "kube-dns.kube-system.svc.cluster.local"
KURA_PUBLIC_ZONE = "kura.tuist.dev"

_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def _is_dns_name(name: str) -> bool:
    return 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split("."))


def demux_name(region_id: str) -> str:
    return f"kura-peer-demux-{region_id}"


def demux_labels(region_id: str) -> dict[str, str]:
    # component=peer-demux + instance=<region> is the selector the failover watcher uses.
    return region_labels(name="kura-peer-demux", component="peer-demux", region=region_id)


def peer_service_name(handle: str, region_id: str) -> str:
    """The account's per-region peer Service (ClusterIP on hostNetwork regions)."""
    name = f"kura-{handle}-{region_id}-peer"
    if len(name) > 63 or not _LABEL.match(name):
        raise ValueError(
            f"kura.accounts: peer Service name '{name}' for account '{handle}' in region "
            f"'{region_id}' is not a DNS label of at most 63 characters; shorten the handle"
        )
    return name


def account_peer_host(handle: str, region: Region, environment: Environment) -> str:
    """`peer.<handle>-<cluster_id><env_suffix>.kura.tuist.dev` (regions.ex, anchor 4.4)."""
    label = f"{handle}-{region.cluster_id}{env_suffix(environment)}"
    if len(label) > 63:
        raise ValueError(
            f"kura.accounts: account '{handle}' gives the host label '{label}' in region "
            f"'{region.id}', longer than 63 characters"
        )
    return f"peer.{label}.{KURA_PUBLIC_ZONE}"


@dataclass(frozen=True)
class PeerRoute:
    """One SNI host and the `<service>.<ns>.svc.cluster.local:<port>` it is passed to."""

    host: str
    backend: str


def peer_routes(region: Region, kura: Kura, environment: Environment) -> list[PeerRoute]:
    service_domain = f"{kura.namespace}.svc.cluster.local"
    routes = [
        PeerRoute(
            host=account_peer_host(handle, region, environment),
            backend=f"{peer_service_name(handle, region.id)}.{service_domain}:{kura.peer_port}",
        )
        for handle in kura.accounts
    ]
    return sorted(routes, key=lambda r: r.host)


def _check_route(route: PeerRoute) -> None:
    # The config is text: refuse anything that could end a map entry or address
    # something outside the cluster's service domain before it reaches nginx.
    if not _is_dns_name(route.host):
        raise ValueError(f"peer route host '{route.host}' is not a lowercase DNS name")
    service, _, port = route.backend.rpartition(":")
    if not (port.isdigit() and 0 < int(port) < 65536):
        raise ValueError(f"peer route backend '{route.backend}' for '{route.host}' has no valid port")
    parts = service.split(".")
    if len(parts) != 5 or parts[2:] != ["svc", "cluster", "local"] or not _is_dns_name(service):
        raise ValueError(
            f"peer route backend '{route.backend}' for '{route.host}' is not "
            "<service>.<namespace>.svc.cluster.local:<port>"
        )


def render_demux_config(
    routes: list[PeerRoute], *, port: int = DEMUX_PORT, resolver: str = CLUSTER_RESOLVER
) -> str:
    """The demux's whole nginx.conf (stream only). Pure; the same routes give the same bytes."""
    hosts = [r.host for r in routes]
    if len(set(hosts)) != len(hosts):
        raise ValueError(f"peer routes repeat a host: {sorted(h for h in set(hosts) if hosts.count(h) > 1)}")
    for route in routes:
        _check_route(route)
    entries = "".join(f'        "ok:{r.host}" {r.backend};\n' for r in sorted(routes, key=lambda r: r.host))
    # nginx lowercases map keys and lookups, so an uppercase SNI would otherwise match.
    # The first map tags an SNI "ok" only when it is already lowercase and DNS-shaped;
    # the second only routes "ok:<exact host>". Everything else gets "" and is closed.
    return (
        "# Generated by tuist-infra (components/peer_demux.py). Do not edit.\n"
        "worker_processes auto;\n"
        "pid /tmp/nginx.pid;\n"
        "error_log /dev/stderr warn;\n"
        "\n"
        "events {\n"
        "    worker_connections 4096;\n"
        "}\n"
        "\n"
        "stream {\n"
        f"    resolver {resolver} valid=10s ipv6=off;\n"
        "    resolver_timeout 2s;\n"
        # Keys are "ok:" + a host of up to 253 bytes; nginx's default bucket (64) refuses
        # to start with ordinary peer hosts.
        "    map_hash_bucket_size 256;\n"
        "\n"
        "    map $ssl_preread_server_name $kura_peer_sni_shape {\n"
        '        "~^[a-z0-9-]{1,63}(\\.[a-z0-9-]{1,63}){1,126}$" ok;\n'
        "        default bad;\n"
        "    }\n"
        "\n"
        '    map "$kura_peer_sni_shape:$ssl_preread_server_name" $kura_peer_backend {\n'
        '        default "";\n'
        f"{entries}"
        "    }\n"
        "\n"
        "    server {\n"
        f"        listen {port};\n"
        "        ssl_preread on;\n"
        "        proxy_pass $kura_peer_backend;\n"
        "        proxy_connect_timeout 5s;\n"
        "        proxy_timeout 10m;\n"
        "    }\n"
        "}\n"
    )


@dataclass(frozen=True)
class PeerDemuxArgs:
    region: Region
    fleet: Fleet
    kura: Kura
    environment: Environment


class PeerDemux(pulumi.ComponentResource):
    """ConfigMap + hostNetwork DaemonSet `kura-peer-demux-<region>` on the region's pool."""

    config_hash: pulumi.Output[str]
    routes: list[PeerRoute]

    def __init__(self, name: str, args: PeerDemuxArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:peer_demux:PeerDemux", name, None, opts)
        region, kura = args.region, args.kura
        # An empty route list still deploys the demux: the failover watcher only routes
        # the IP to a box with a Ready demux pod, accounts or not.
        self.routes = peer_routes(region, kura, args.environment)
        conf = render_demux_config(self.routes, port=kura.peer_port)
        digest = config_hash(conf)
        labels = demux_labels(region.id)
        child = pulumi.ResourceOptions(parent=self)

        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-config",
            metadata=metadata(demux_name(region.id), kura.namespace, labels),
            data={"nginx.conf": conf},
            opts=child,
        )
        self.daemon_set = k8s.apps.v1.DaemonSet(
            f"{name}-daemonset",
            metadata=metadata(demux_name(region.id), kura.namespace, labels),
            spec=k8s.apps.v1.DaemonSetSpecArgs(
                selector=k8s.meta.v1.LabelSelectorArgs(match_labels=labels),
                template=k8s.core.v1.PodTemplateSpecArgs(
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        labels=labels, annotations={CONFIG_HASH_ANNOTATION: digest}
                    ),
                    spec=k8s.core.v1.PodSpecArgs(
                        host_network=True,
                        dns_policy="ClusterFirstWithHostNet",
                        node_selector=pool_node_selector(args.fleet),
                        tolerations=pool_tolerations(args.fleet),
                        containers=[
                            k8s.core.v1.ContainerArgs(
                                name="nginx",
                                image=DEMUX_IMAGE,
                                ports=[
                                    k8s.core.v1.ContainerPortArgs(
                                        name="peer", container_port=kura.peer_port, protocol="TCP"
                                    )
                                ],
                                readiness_probe=k8s.core.v1.ProbeArgs(
                                    tcp_socket=k8s.core.v1.TCPSocketActionArgs(port=kura.peer_port),
                                    initial_delay_seconds=5,
                                    period_seconds=10,
                                ),
                                resources=k8s.core.v1.ResourceRequirementsArgs(
                                    requests={"cpu": "50m", "memory": "64Mi"},
                                    limits={"memory": "256Mi"},
                                ),
                                volume_mounts=[
                                    k8s.core.v1.VolumeMountArgs(
                                        name="config",
                                        mount_path="/etc/nginx/nginx.conf",
                                        sub_path="nginx.conf",
                                        read_only=True,
                                    )
                                ],
                            )
                        ],
                        volumes=[
                            k8s.core.v1.VolumeArgs(
                                name="config",
                                config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(name=demux_name(region.id)),
                            )
                        ],
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.config_map]),
        )
        self.config_hash = pulumi.Output.from_input(digest)
        self.register_outputs(
            {"name": demux_name(region.id), "config_hash": digest, "hosts": [r.host for r in self.routes]}
        )
