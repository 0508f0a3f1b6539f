"""Regional DNS records as external-dns DNSEndpoint objects (anchor 4.4).

The peer plane (`peer.<host>` and `*.peer.<host>`) points at the region's failover IP, which the
failover watcher keeps on a box with a Ready demux. The wildcard covers every account's peer host,
so a new account needs no record (the demux routes it from the cluster, demux/). The literal
`peer.<host>` exists because a wildcard does not cover a name that has records of its own below it
(RFC 4592), e.g. an account called `peer`.
The public wildcard `*.<host>` (the DNSEndpoint `kura-regional-<region>-dns`) points at the boxes
whose hostNetwork gateway serves now, and nothing else: the region's DNS reconciler
(components/dns_reconciler.py, `python -m regional_dns`) rewrites its records every 30 s from the
Ready gateway pods on healthy Nodes, keeps them on a failed read and withdraws them when no gateway
serves. The program creates that object and never sends its spec (`ignore_changes`): the records
are the reconciler's (server-side apply, field manager `kura-regional-dns`), so an up neither
overwrites nor deletes them. A stack whose records the program itself once wrote keeps them until
the reconciler's first pass replaces them. A load_balancer region gets no public wildcard here: its
clients reach its load balancer, whose address is not its boxes'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi

from components import kube as k8s
from components.k8s import child_options, metadata, region_labels
from regional_dns.records import DNS_TTL

__all__ = [
    "DNS_TTL",
    "DnsRecords",
    "DnsRecordsArgs",
    "peer_endpoints",
    "regional_dns_name",
]

DNSENDPOINT_API_VERSION = "externaldns.k8s.io/v1alpha1"


def regional_dns_name(region_id: str) -> str:
    return f"kura-regional-{region_id}-dns"


def _a_record(name: str, targets: Any) -> dict[str, Any]:
    return {"dnsName": name, "recordType": "A", "recordTTL": DNS_TTL, "targets": targets}


def peer_endpoints(host: str, failover_address: str) -> list[dict[str, Any]]:
    return [_a_record(n, [failover_address]) for n in (f"peer.{host}", f"*.peer.{host}")]


@dataclass(frozen=True)
class DnsRecordsArgs:
    region_id: str
    host: str
    namespace: str
    # None while the region's failover IP is parked (or the region has none).
    failover_address: str | None
    # Whether the region has a public wildcard (a host_network region): its DNSEndpoint is made here,
    # its records are written by the region's DNS reconciler.
    public: bool = True


class DnsRecords(pulumi.ComponentResource):
    """DNSEndpoints `kura-regional-<region>-dns` (public) and `kura-peer-<region>-dns` (peer)."""

    peer_records: pulumi.Output[bool]

    def __init__(self, name: str, args: DnsRecordsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("tuist:dns:DnsRecords", name, None, opts)
        labels = region_labels(name="kura-dns", component="dns", region=args.region_id)
        child = child_options(self, opts)
        self.public: k8s.apiextensions.CustomResource | None = None
        self.peer: k8s.apiextensions.CustomResource | None = None

        if args.public:
            # No spec: spec.endpoints is the reconciler's. ignore_changes keeps an up from sending the
            # records a stack's state still holds from when the program wrote them.
            self.public = k8s.apiextensions.CustomResource(
                f"{name}-public",
                api_version=DNSENDPOINT_API_VERSION,
                kind="DNSEndpoint",
                metadata=metadata(regional_dns_name(args.region_id), args.namespace, labels),
                opts=child_options(self, opts, ignore_changes=["spec"]),
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
                "public_records": args.public,
                "peer_records": self.peer is not None,
                "peer_records_reason": "routed" if self.peer is not None else "failover IP parked or absent",
            }
        )
