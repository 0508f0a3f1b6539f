"""Where a region's public wildcard should point, from what the cluster shows (pure; anchor 4.4).

A box serves the public plane when its gateway pod (ingress-nginx on hostNetwork,
components/gateway.py) is Ready and not terminating, on a Node that is Ready, not cordoned (a
release cordons before it drains, as `kubectl drain` does: the box is being evacuated) and not being
deleted. Its address is its Node's: a publishable ExternalIP when the Node has one, else its
InternalIP. Our boxes join with the kubelet's `--node-ip` set to their public IPv4 and no cloud
controller adds an ExternalIP, so the InternalIP is the public address, the one the gateway itself
reports (`--report-node-internal-ip-address`). Private (RFC 1918), shared (CGNAT, RFC 6598) and
other unroutable addresses never become a record. IPv4 only: external-dns manages A records
(components/external_dns.py, `--managed-record-types=A`).

No healthy box gives no wildcard at all (an empty endpoint list): the plane is withdrawn rather
than pointed at boxes that do not answer. A pool whose every Node has Ready `Unknown` is not judged
at all (`kubelets_unheard`): the control plane has lost its kubelets, not the boxes their gateways.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from watcher.decision import PodView  # the failover watcher's view of a pod: the same facts

__all__ = [
    "DNS_TTL",
    "UNPUBLISHABLE",
    "Healthy",
    "NodeAddress",
    "NodeView",
    "PodView",
    "healthy_targets",
    "kubelets_unheard",
    "node_targets",
    "publishable",
    "wildcard_endpoints",
]

DNS_TTL = 60

# Never a public record: what no client on the internet can reach. The dev stack's boxes live in
# 198.18.0.0/15 (RFC 2544) and stay publishable, as any other unicast address outside these.
UNPUBLISHABLE = tuple(
    ipaddress.IPv4Network(net)
    for net in (
        "0.0.0.0/8",  # "this network"
        "10.0.0.0/8",  # RFC 1918
        "100.64.0.0/10",  # RFC 6598 shared address space (CGNAT)
        "127.0.0.0/8",  # loopback
        "169.254.0.0/16",  # link-local
        "172.16.0.0/12",  # RFC 1918
        "192.168.0.0/16",  # RFC 1918
        "224.0.0.0/4",  # multicast
        "240.0.0.0/4",  # reserved, and the limited broadcast address
    )
)
_PREFERENCE = ("ExternalIP", "InternalIP")


@dataclass(frozen=True)
class NodeAddress:
    type: str  # ExternalIP, InternalIP, Hostname, ...
    address: str


@dataclass(frozen=True)
class NodeView:
    name: str
    ready: bool
    terminating: bool = False
    unschedulable: bool = False
    addresses: tuple[NodeAddress, ...] = ()
    # Its Ready condition reads Unknown: the node controller has heard nothing from its kubelet for the
    # grace period (NodeStatusUnknown). Not ready all the same; `kubelets_unheard` looks at the pool.
    ready_unknown: bool = False


@dataclass(frozen=True)
class Healthy:
    """The wildcard's targets (sorted, unique) and, per gateway pod left out, why."""

    targets: tuple[str, ...]
    left_out: tuple[str, ...] = ()


def publishable(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return isinstance(ip, ipaddress.IPv4Address) and not any(ip in net for net in UNPUBLISHABLE)


def node_targets(node: NodeView) -> tuple[str, ...]:
    """The Node's publishable IPv4s of the first address type that has any (ExternalIP first)."""
    for kind in _PREFERENCE:
        found = sorted(
            {a.address for a in node.addresses if a.type == kind and publishable(a.address)},
            key=ipaddress.IPv4Address,
        )
        if found:
            return tuple(found)
    return ()


def _node_unfit(node: NodeView | None) -> str | None:
    if node is None:
        return "its node is not in the region's pool"
    if not node.ready:
        return f"node {node.name} NotReady"
    if node.terminating:
        return f"node {node.name} terminating"
    if node.unschedulable:
        return f"node {node.name} cordoned"
    if not node_targets(node):
        listed = ", ".join(a.address for a in node.addresses if a.type in _PREFERENCE) or "none"
        return f"node {node.name} has no publishable IPv4 (addresses: {listed})"
    return None


def _pod_unfit(pod: PodView, nodes: dict[str, NodeView]) -> str | None:
    if pod.node_name is None:
        return "not scheduled"
    if pod.terminating:
        return "terminating"
    if not pod.ready:
        return "not Ready"
    return _node_unfit(nodes.get(pod.node_name))


def kubelets_unheard(nodes: Iterable[NodeView]) -> bool:
    """Whether the pool has Nodes and every one reads Ready Unknown: the control plane lost all its
    kubelets at once (an apiserver restart, a firewall mistake), which is no news of the boxes. One
    Node that reads Ready True or False, or none at all, and the pool is judged as it reads."""
    pool = list(nodes)
    return bool(pool) and all(n.ready_unknown for n in pool)


def healthy_targets(nodes: Iterable[NodeView], gateway_pods: Iterable[PodView]) -> Healthy:
    """The addresses of the boxes whose gateway serves now (see the module's docstring)."""
    by_name = {n.name: n for n in nodes}
    targets: set[str] = set()
    left_out: list[str] = []
    for pod in sorted(gateway_pods, key=lambda p: p.name):
        why = _pod_unfit(pod, by_name)
        if why is None:
            assert pod.node_name is not None
            targets.update(node_targets(by_name[pod.node_name]))
        else:
            left_out.append(f"{pod.name} on {pod.node_name or '-'}: {why}")
    return Healthy(tuple(sorted(targets, key=ipaddress.IPv4Address)), tuple(left_out))


def wildcard_endpoints(host: str, targets: Sequence[str]) -> list[dict[str, Any]]:
    """The DNSEndpoint's spec.endpoints: one A record `*.<host>`, or none when nothing serves."""
    if not targets:
        return []
    return [{"dnsName": f"*.{host}", "recordType": "A", "recordTTL": DNS_TTL, "targets": list(targets)}]
