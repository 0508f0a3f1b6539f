"""Regional DNS records as external-dns DNSEndpoint objects (anchor 4.4).

The peer plane (`peer.<host>` and `*.peer.<host>`) points at the region's failover IP, which the
failover watcher keeps on a box with a Ready demux. The wildcard covers every account's peer host,
so a new account needs no record (the demux routes it from the cluster, demux/). The literal
`peer.<host>` exists because a wildcard does not cover a name that has records of its own below it
(RFC 4592), e.g. an account called `peer`.
The public wildcard `*.<host>` points at the region's boxes (the hostNetwork gateways).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import child_options, metadata, region_labels

__all__ = [
    "DNS_TTL",
    "DnsRecords",
    "DnsRecordsArgs",
    "peer_endpoints",
    "public_endpoints",
    "regional_dns_name",
]

DNS_TTL = 60
DNSENDPOINT_API_VERSION = "externaldns.k8s.io/v1alpha1"


def regional_dns_name(region_id: str) -> str:
    return f"kura-regional-{region_id}-dns"


def _a_record(name: str, targets: Any) -> dict[str, Any]:
    return {"dnsName": name, "recordType": "A", "recordTTL": DNS_TTL, "targets": targets}


def peer_endpoints(host: str, failover_address: str) -> list[dict[str, Any]]:
    return [_a_record(n, [failover_address]) for n in (f"peer.{host}", f"*.peer.{host}")]


def public_endpoints(host: str, targets: Any) -> list[dict[str, Any]]:
    return [_a_record(f"*.{host}", targets)]


@dataclass(frozen=True)
class DnsRecordsArgs:
    region_id: str
    host: str
    namespace: str
    # None while the region's failover IP is parked (or the region has none).
    failover_address: str | None
    # The boxes' public IPv4s (from the fleet's machines); empty publishes no public wildcard.
    public_ipv4s: pulumi.Input[Sequence[pulumi.Input[str]]] = field(default_factory=tuple)


class DnsRecords(pulumi.ComponentResource):
    """DNSEndpoints `kura-regional-<region>-dns` (public) and `kura-peer-<region>-dns` (peer)."""

    peer_records: pulumi.Output[bool]

    def __init__(self, name: str, args: DnsRecordsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:dns:DnsRecords", name, None, opts)
        labels = region_labels(name="kura-dns", component="dns", region=args.region_id)
        child = child_options(self, opts)
        self.public: k8s.apiextensions.CustomResource | None = None
        self.peer: k8s.apiextensions.CustomResource | None = None

        has_public = not (isinstance(args.public_ipv4s, (list, tuple)) and len(args.public_ipv4s) == 0)
        if has_public:
            self.public = k8s.apiextensions.CustomResource(
                f"{name}-public",
                api_version=DNSENDPOINT_API_VERSION,
                kind="DNSEndpoint",
                metadata=metadata(regional_dns_name(args.region_id), args.namespace, labels),
                spec={"endpoints": public_endpoints(args.host, args.public_ipv4s)},
                opts=child,
            )
        # A parked failover IP publishes no peer records at all rather than a guess: a
        # peer name pointing at a box without the IP would blackhole the mesh.
        if args.failover_address is not None:
            self.peer = k8s.apiextensions.CustomResource(
                f"{name}-peer",
                api_version=DNSENDPOINT_API_VERSION,
                kind="DNSEndpoint",
                metadata=metadata(f"kura-peer-{args.region_id}-dns", args.namespace, labels),
                spec={"endpoints": peer_endpoints(args.host, args.failover_address)},
                opts=child,
            )
        self.peer_records = pulumi.Output.from_input(self.peer is not None)
        self.register_outputs(
            {
                "public_records": has_public,
                "peer_records": self.peer is not None,
                "peer_records_reason": "routed" if self.peer is not None else "failover IP parked or absent",
            }
        )
