"""external-dns with the crd source on the real control plane: the program installs the published
DNSEndpoint CRD, the apiserver accepts the regions' records against it, and external-dns's own
identity can do exactly what its crd source does (list and watch DNSEndpoints of the Kura namespace,
update their status) and nothing else."""

from __future__ import annotations

from collections.abc import Iterator

import pulumi
import pytest
from kubernetes import client as k8s

from components.dns import DnsRecords, DnsRecordsArgs
from components.external_dns import DNSENDPOINT_GROUP, ExternalDns, ExternalDnsArgs, dns_namespace
from config.models import Cluster, Environment
from tests.cluster.k8s_support import apply, can, rendered, sa, service_account_api, suffix
from tests.support.cluster import KubeCluster

HOST = "eu-central.staging.kura.tuist.dev"


@pytest.fixture
def namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    ns = f"kura-{suffix()}"
    kube_cluster.core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=ns)))
    cluster = Cluster(runners_controller_image="rc:1")
    args = ExternalDnsArgs(
        namespace=ns,
        cluster=cluster,
        environment=Environment.STAGING,
        cloudflare_api_token=pulumi.Output.secret("cf-token"),
    )
    apply(kube_cluster, rendered(lambda: ExternalDns("external-dns", args)))
    records = DnsRecordsArgs(
        region_id="eu-central",
        host=HOST,
        namespace=ns,
        failover_address="203.0.113.20",
    )
    apply(kube_cluster, rendered(lambda: DnsRecords("dns", records)))
    yield ns
    kube_cluster.delete_namespace(dns_namespace(ns))
    kube_cluster.delete_namespace(ns)


def test_the_regions_records_are_stored_as_published_dnsendpoints(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    custom = k8s.CustomObjectsApi(kube_cluster.api)
    items = custom.list_namespaced_custom_object(DNSENDPOINT_GROUP, "v1alpha1", namespace, "dnsendpoints")[
        "items"
    ]
    assert sorted(item["metadata"]["name"] for item in items) == [
        "kura-peer-eu-central-dns",
        "kura-regional-eu-central-dns",
    ]
    # The public wildcard's records are the region's DNS reconciler's (tests/regional_dns/test_loop.py).
    names = {e["dnsName"]: e["targets"] for item in items for e in item.get("spec", {}).get("endpoints", [])}
    assert names == {f"peer.{HOST}": ["203.0.113.20"], f"*.peer.{HOST}": ["203.0.113.20"]}


def test_external_dns_reads_dnsendpoints_and_records_what_it_published(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    # What source/crd.go does, as external-dns's ServiceAccount: list, watch, update the status.
    # Its account lives in its own namespace (with its token); its Role is in the Kura namespace.
    custom = k8s.CustomObjectsApi(service_account_api(kube_cluster, dns_namespace(namespace), "external-dns"))
    listing = custom.list_namespaced_custom_object(DNSENDPOINT_GROUP, "v1alpha1", namespace, "dnsendpoints")
    assert len(listing["items"]) == 2
    endpoint = listing["items"][0]
    endpoint["status"] = {"observedGeneration": endpoint["metadata"]["generation"]}
    custom.replace_namespaced_custom_object_status(
        DNSENDPOINT_GROUP, "v1alpha1", namespace, "dnsendpoints", endpoint["metadata"]["name"], endpoint
    )
    with pytest.raises(k8s.ApiException) as error:
        custom.list_cluster_custom_object(DNSENDPOINT_GROUP, "v1alpha1", "dnsendpoints")
    assert error.value.status == 403


def test_external_dns_can_do_nothing_else(kube_cluster: KubeCluster, namespace: str) -> None:
    me = sa(dns_namespace(namespace), "external-dns")
    assert not can(kube_cluster, me, "update", "dnsendpoints", group=DNSENDPOINT_GROUP, namespace=namespace)
    assert not can(kube_cluster, me, "list", "dnsendpoints", group=DNSENDPOINT_GROUP, namespace="default")
    assert not can(kube_cluster, me, "get", "secrets", namespace=namespace)
    assert not can(kube_cluster, me, "get", "secrets", namespace=dns_namespace(namespace))
    assert not can(kube_cluster, me, "list", "services", namespace=namespace)
    assert not can(kube_cluster, me, "list", "nodes")
