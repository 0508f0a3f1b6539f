"""DnsRecords: DNSEndpoints for the public and peer planes, validated against the CRD."""

from __future__ import annotations

from typing import Any

import pulumi

from components.dns import DnsRecords, DnsRecordsArgs, peer_endpoints
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

HOST = "us-east.staging.kura.tuist.dev"


def render(
    failover: str | None,
    public: tuple[str, ...] = ("198.51.100.1", "198.51.100.2"),
    seen: dict[str, Any] | None = None,
) -> ManifestRecorder:
    sink: dict[str, Any] = seen if seen is not None else {}

    def build() -> Any:
        dns = DnsRecords(
            "dns",
            DnsRecordsArgs(
                region_id="us-east",
                host=HOST,
                namespace="kura",
                failover_address=failover,
                public_ipv4s=list(public),
            ),
        )
        return dns.peer_records.apply(lambda v: sink.update(peer_records=v))

    return collect_manifests(build)


def a(name: str, *targets: str) -> dict[str, Any]:
    return {"dnsName": name, "recordType": "A", "recordTTL": 60, "targets": list(targets)}


def test_peer_plane_points_at_the_failover_ip() -> None:
    recorded = render("203.0.113.7")
    assert recorded.find("DNSEndpoint", "kura-peer-us-east-dns")["spec"] == {
        "endpoints": [
            a(f"peer.{HOST}", "203.0.113.7"),
            a(f"*.peer.{HOST}", "203.0.113.7"),
        ]
    }


def test_public_wildcard_points_at_the_boxes() -> None:
    recorded = render("203.0.113.7")
    assert recorded.find("DNSEndpoint", "kura-regional-us-east-dns")["spec"] == {
        "endpoints": [a(f"*.{HOST}", "198.51.100.1", "198.51.100.2")]
    }


def test_parked_failover_ip_publishes_no_peer_records_and_says_so() -> None:
    seen: dict[str, Any] = {}
    recorded = render(None, seen=seen)
    assert [m["metadata"]["name"] for m in recorded.of_kind("DNSEndpoint")] == ["kura-regional-us-east-dns"]
    assert seen == {"peer_records": False}


def test_no_known_boxes_publishes_no_public_wildcard() -> None:
    recorded = render("203.0.113.7", public=())
    assert [m["metadata"]["name"] for m in recorded.of_kind("DNSEndpoint")] == ["kura-peer-us-east-dns"]


def test_public_targets_may_be_an_output_of_the_fleet() -> None:
    def build() -> None:
        DnsRecords(
            "dns",
            DnsRecordsArgs(
                region_id="us-east",
                host=HOST,
                namespace="kura",
                failover_address=None,
                public_ipv4s=pulumi.Output.from_input(["198.51.100.9"]),
            ),
        )

    recorded = collect_manifests(build)
    assert recorded.find("DNSEndpoint", "kura-regional-us-east-dns")["spec"]["endpoints"][0]["targets"] == [
        "198.51.100.9"
    ]


def test_literal_peer_name_comes_before_its_wildcard() -> None:
    # RFC 4592: the wildcard does not cover peer.<host> itself.
    assert [e["dnsName"] for e in peer_endpoints(HOST, "203.0.113.7")] == [f"peer.{HOST}", f"*.peer.{HOST}"]


def test_every_dnsendpoint_is_valid_against_the_crd() -> None:
    recorded = render("203.0.113.7")
    assert len(recorded.of_kind("DNSEndpoint")) == 2
    for manifest in recorded.manifests:
        validate_manifest(manifest)
