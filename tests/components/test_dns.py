"""DnsRecords: DNSEndpoints for the public and peer planes, validated against the CRD. The public
plane's records are written at runtime (tests/regional_dns/); here, that the program never sends them."""

from __future__ import annotations

from typing import Any

from components.dns import DnsRecords, DnsRecordsArgs, peer_endpoints
from tests.support.k8s_schema import ManifestRecorder, collect_manifests, validate_manifest

HOST = "us-east.staging.kura.tuist.dev"
LABELS = {
    "app.kubernetes.io/name": "kura-dns",
    "app.kubernetes.io/component": "dns",
    "app.kubernetes.io/instance": "us-east",
    "app.kubernetes.io/managed-by": "tuist-infra",
    "tuist.dev/region": "us-east",
}


def render(failover: str | None, public: bool = True, seen: dict[str, Any] | None = None) -> ManifestRecorder:
    sink: dict[str, Any] = seen if seen is not None else {}

    def build() -> Any:
        dns = DnsRecords(
            "dns",
            DnsRecordsArgs(
                region_id="us-east", host=HOST, namespace="kura", failover_address=failover, public=public
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


def test_the_public_dnsendpoint_is_created_without_records() -> None:
    # Its spec.endpoints belong to the region's DNS reconciler (python -m regional_dns).
    recorded = render("203.0.113.7")
    assert recorded.find("DNSEndpoint", "kura-regional-us-east-dns") == {
        "apiVersion": "externaldns.k8s.io/v1alpha1",
        "kind": "DNSEndpoint",
        "metadata": {"name": "kura-regional-us-east-dns", "namespace": "kura", "labels": LABELS},
    }


def test_an_up_never_sends_the_records_a_stack_once_deployed() -> None:
    # A stack whose state holds the program's own static records (before the reconciler): ignoring
    # spec keeps them out of every update, so the live records stay until the reconciler rewrites them.
    recorded = render("203.0.113.7")
    assert recorded.options["dns-public"].ignore_changes == ["spec"]
    assert recorded.options["dns-peer"].ignore_changes is None


def test_parked_failover_ip_publishes_no_peer_records_and_says_so() -> None:
    seen: dict[str, Any] = {}
    recorded = render(None, seen=seen)
    assert [m["metadata"]["name"] for m in recorded.of_kind("DNSEndpoint")] == ["kura-regional-us-east-dns"]
    assert seen == {"peer_records": False}


def test_a_region_without_a_public_plane_gets_no_public_dnsendpoint() -> None:
    recorded = render("203.0.113.7", public=False)
    assert [m["metadata"]["name"] for m in recorded.of_kind("DNSEndpoint")] == ["kura-peer-us-east-dns"]


def test_literal_peer_name_comes_before_its_wildcard() -> None:
    # RFC 4592: the wildcard does not cover peer.<host> itself.
    assert [e["dnsName"] for e in peer_endpoints(HOST, "203.0.113.7")] == [f"peer.{HOST}", f"*.peer.{HOST}"]


def test_every_dnsendpoint_is_valid_against_the_crd() -> None:
    recorded = render("203.0.113.7")
    assert len(recorded.of_kind("DNSEndpoint")) == 2
    for manifest in recorded.manifests:
        validate_manifest(manifest)
