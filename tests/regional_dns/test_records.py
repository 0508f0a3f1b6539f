"""The public wildcard's targets from Nodes and gateway pods, table-driven (pure)."""

from __future__ import annotations

import pytest

from regional_dns.records import (
    Healthy,
    NodeAddress,
    NodeView,
    PodView,
    healthy_targets,
    kubelets_unheard,
    node_targets,
    publishable,
    wildcard_endpoints,
)

HOST = "us-east.staging.kura.tuist.dev"
A, B = "198.51.100.1", "198.51.100.2"


def node(name: str, internal: str | None = None, *, external: str | None = None, **kw: bool) -> NodeView:
    addresses = [NodeAddress("Hostname", name)]
    if internal is not None:
        addresses.append(NodeAddress("InternalIP", internal))
    if external is not None:
        addresses.append(NodeAddress("ExternalIP", external))
    return NodeView(name=name, ready=kw.pop("ready", True), addresses=tuple(addresses), **kw)


def gateway(
    node_name: str | None, *, ready: bool = True, terminating: bool = False, name: str = ""
) -> PodView:
    return PodView(name=name or f"gw-{node_name}", node_name=node_name, ready=ready, terminating=terminating)


CASES: list[tuple[str, list[NodeView], list[PodView], Healthy]] = [
    (
        "every Ready gateway on a healthy box counts, addresses sorted as numbers",
        [node("b", "198.51.100.10"), node("a", "198.51.100.9")],
        [gateway("b"), gateway("a")],
        Healthy(("198.51.100.9", "198.51.100.10")),
    ),
    (
        "an unready gateway pod leaves its box out",
        [node("a", A), node("b", B)],
        [gateway("a", ready=False), gateway("b")],
        Healthy((B,), ("gw-a on a: not Ready",)),
    ),
    (
        "a terminating gateway pod (a roll, a drain) leaves its box out at once",
        [node("a", A), node("b", B)],
        [gateway("a", terminating=True), gateway("b")],
        Healthy((B,), ("gw-a on a: terminating",)),
    ),
    (
        "a cordoned box is being evacuated",
        [node("a", A, unschedulable=True), node("b", B)],
        [gateway("a"), gateway("b")],
        Healthy((B,), ("gw-a on a: node a cordoned",)),
    ),
    (
        "a NotReady box is out even while its pod still reads Ready",
        [node("a", A, ready=False), node("b", B)],
        [gateway("a"), gateway("b")],
        Healthy((B,), ("gw-a on a: node a NotReady",)),
    ),
    (
        "a Node being deleted is out",
        [node("a", A, terminating=True), node("b", B)],
        [gateway("a"), gateway("b")],
        Healthy((B,), ("gw-a on a: node a terminating",)),
    ),
    (
        "a gateway on a node outside the pool (or gone) is out",
        [node("b", B)],
        [gateway("a"), gateway("b")],
        Healthy((B,), ("gw-a on a: its node is not in the region's pool",)),
    ),
    (
        "a pending pod is out",
        [node("a", A)],
        [gateway(None, name="gw-pending"), gateway("a")],
        Healthy((A,), ("gw-pending on -: not scheduled",)),
    ),
    (
        "a private (RFC 1918) node address is never published",
        [node("a", "10.0.0.5"), node("b", B)],
        [gateway("a"), gateway("b")],
        Healthy((B,), ("gw-a on a: node a has no publishable IPv4 (addresses: 10.0.0.5)",)),
    ),
    (
        "a CGNAT (RFC 6598) node address is never published",
        [node("a", "100.64.3.4"), node("b", B)],
        [gateway("a"), gateway("b")],
        Healthy((B,), ("gw-a on a: node a has no publishable IPv4 (addresses: 100.64.3.4)",)),
    ),
    (
        "a roll's new Ready pod beside the old terminating one keeps the box",
        [node("a", A)],
        [gateway("a", terminating=True, name="gw-old"), gateway("a", name="gw-new")],
        Healthy((A,), ("gw-old on a: terminating",)),
    ),
    (
        "no healthy gateway: an empty set (the wildcard is withdrawn)",
        [node("a", A), node("b", B, unschedulable=True)],
        [gateway("a", ready=False), gateway("b")],
        Healthy((), ("gw-a on a: not Ready", "gw-b on b: node b cordoned")),
    ),
    ("no gateway pod at all: an empty set", [node("a", A)], [], Healthy(())),
]


@pytest.mark.parametrize(("nodes", "pods", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_healthy_targets(nodes: list[NodeView], pods: list[PodView], expected: Healthy) -> None:
    assert healthy_targets(nodes, pods) == expected


def unheard(name: str, internal: str) -> NodeView:
    """A Node whose Ready condition reads Unknown: the node controller heard nothing from its kubelet."""
    return node(name, internal, ready=False, ready_unknown=True)


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([unheard("a", A), unheard("b", B)], True),
        ([unheard("a", A)], True),
        ([unheard("a", A), node("b", B)], False),
        ([unheard("a", A), node("b", B, ready=False)], False),
        ([unheard("a", A), node("b", B, ready=False, unschedulable=True)], False),
        ([], False),
    ],
    ids=[
        "every Node Unknown",
        "the one Node Unknown",
        "one Node Ready=True",
        "one Node Ready=False",
        "one cordoned Node Ready=False",
        "no Node at all",
    ],
)
def test_kubelets_unheard(nodes: list[NodeView], expected: bool) -> None:
    assert kubelets_unheard(nodes) is expected


def test_a_node_reading_unknown_is_not_ready_to_the_targets() -> None:
    # Judged at all (one Node heard), a Node reading Unknown is left out as NotReady.
    assert healthy_targets([unheard("a", A), node("b", B)], [gateway("a"), gateway("b")]) == Healthy(
        (B,), ("gw-a on a: node a NotReady",)
    )


def test_an_external_ip_is_preferred_over_the_internal_one() -> None:
    assert node_targets(node("a", "198.51.100.1", external="203.0.113.1")) == ("203.0.113.1",)


def test_a_private_external_ip_falls_back_to_the_public_internal_one() -> None:
    assert node_targets(node("a", "198.51.100.1", external="192.168.1.1")) == ("198.51.100.1",)


def test_ipv6_and_hostnames_are_not_a_records() -> None:
    assert node_targets(node("a", "2001:db8::1")) == ()


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("198.51.100.7", True),
        ("203.0.113.7", True),
        ("198.18.0.5", True),  # the dev stack's boxes (RFC 2544): routable as far as DNS cares
        ("8.8.8.8", True),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("172.31.255.255", False),
        ("172.32.0.1", True),
        ("192.168.0.1", False),
        ("100.64.0.1", False),
        ("100.127.255.255", False),
        ("100.128.0.1", True),
        ("127.0.0.1", False),
        ("169.254.1.1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("255.255.255.255", False),
        ("2001:db8::1", False),
        ("not-an-ip", False),
    ],
)
def test_publishable(address: str, expected: bool) -> None:
    assert publishable(address) is expected


def test_the_wildcard_is_one_a_record_with_ttl_60() -> None:
    assert wildcard_endpoints(HOST, [A, B]) == [
        {"dnsName": f"*.{HOST}", "recordType": "A", "recordTTL": 60, "targets": [A, B]}
    ]


def test_no_target_is_no_record() -> None:
    assert wildcard_endpoints(HOST, []) == []
