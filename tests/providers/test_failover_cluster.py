"""FailoverIPProvider with the stack's cluster: the deploy ranks the candidates by the watcher's own
rule (Ready, uncordoned Node of the pool, Ready peer-demux pod of the region, Node name first), read
from the session's real control plane, and moves through vendorsim's OVH failover API. Without an
answer from the cluster, or with nothing eligible in it yet, the deploy-time rule stands."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from providers.failover import FailoverIPProvider
from tests.ops.test_cluster import make_demux, make_node
from tests.providers.conftest import Vendorsim
from tests.providers.test_failover_vendorsim import CASES, audit, props, provider_for
from tests.support.cluster import KubeCluster

OVH = CASES[0]  # low ns1001, high ns1003; 198.51.100.10 is routed to low already, .11 is unrouted
REGION = "eu-central"  # props()'s region: the demux pods' instance label


@pytest.fixture
def pool(kube_cluster: KubeCluster) -> Iterator[str]:
    """A Node pool of this test's own on the session's shared cluster; its Nodes go after."""
    name = f"fo-{uuid.uuid4().hex[:8]}"
    yield name
    core = kube_cluster.core
    for node in core.list_node(label_selector=f"node.cluster.x-k8s.io/pool={name}").items:
        core.delete_node(node.metadata.name)


def cluster_provider(
    sim: Vendorsim, cluster: KubeCluster, kubeconfig: str | None = None
) -> FailoverIPProvider:
    return provider_for(sim, kubeconfig=kubeconfig or cluster.kubeconfig.read_text())


def in_cluster(case_props: dict[str, Any], pool: str, namespace: str) -> dict[str, Any]:
    return {**case_props, "node_pool": pool, "namespace": namespace}


def node_for(
    cluster: KubeCluster,
    pool: str,
    namespace: str,
    box: str,
    name: str,
    *,
    cordoned: bool = False,
    demux: bool = True,
) -> None:
    make_node(cluster, name, box, pool, cordoned=cordoned)
    if demux:
        make_demux(cluster, namespace, name, REGION)


def test_the_deploy_skips_a_cordoned_lowest_box_for_the_eligible_one(
    vendorsim: Vendorsim,
    kube_cluster: KubeCluster,
    namespace: str,
    pool: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The lowest box id is cordoned (a release has begun): the deploy-time rule alone would route the
    # IP there, and the watcher would move it off two polls later.
    node_for(kube_cluster, pool, namespace, OVH.low, f"{pool}-a", cordoned=True)
    node_for(kube_cluster, pool, namespace, OVH.high, f"{pool}-b")
    caplog.set_level(logging.INFO, logger="providers.failover")
    provider = cluster_provider(vendorsim, kube_cluster)
    created = provider.create(in_cluster(props(OVH, OVH.unrouted_ip, [OVH.low, OVH.high]), pool, namespace))
    assert created.outs["routed_to"] == OVH.high
    assert created.outs["node_pool"] == pool and created.outs["namespace"] == namespace
    assert audit(vendorsim) == [OVH.write(OVH.unrouted_ip, OVH.high)]
    assert (
        "failover IP 198.51.100.11 (region eu-central, fleet kura-ovh): moved from unrouted to "
        "ns1003.ip-203-0-113.net (eligible per the cluster)"
    ) in caplog.messages


def test_the_current_box_is_left_when_its_node_is_not_eligible_and_ranked_by_node_name(
    vendorsim: Vendorsim, kube_cluster: KubeCluster, namespace: str, pool: str
) -> None:
    # 198.51.100.10 is on the low box, whose demux is not running. Two other boxes are eligible: the
    # one whose Node's name sorts first wins, though its box id sorts last (the watcher's ranking).
    middle = "ns1002.ip-203-0-113.net"
    node_for(kube_cluster, pool, namespace, OVH.low, f"{pool}-a", demux=False)
    node_for(kube_cluster, pool, namespace, middle, f"{pool}-z")
    node_for(kube_cluster, pool, namespace, OVH.high, f"{pool}-m")
    provider = cluster_provider(vendorsim, kube_cluster)
    updated = provider.update(
        OVH.routed_ip,
        {**props(OVH, OVH.routed_ip, [OVH.low]), "routed_to": OVH.low},
        in_cluster(props(OVH, OVH.routed_ip, [OVH.low, middle, OVH.high]), pool, namespace),
    )
    assert updated.outs is not None and updated.outs["routed_to"] == OVH.high
    assert audit(vendorsim) == [OVH.write(OVH.routed_ip, OVH.high)]


def test_nothing_eligible_yet_falls_back_to_the_deploy_time_rule_and_says_so(
    vendorsim: Vendorsim,
    kube_cluster: KubeCluster,
    namespace: str,
    pool: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The up that creates a region: its machines joined, its demux pods are not Ready yet.
    node_for(kube_cluster, pool, namespace, OVH.high, f"{pool}-a", demux=False)
    node_for(kube_cluster, pool, namespace, OVH.low, f"{pool}-b", demux=False)
    caplog.set_level(logging.INFO, logger="providers.failover")
    created = cluster_provider(vendorsim, kube_cluster).create(
        in_cluster(props(OVH, OVH.unrouted_ip, [OVH.low, OVH.high]), pool, namespace)
    )
    assert created.outs["routed_to"] == OVH.low
    assert audit(vendorsim) == [OVH.write(OVH.unrouted_ip, OVH.low)]
    assert (
        "failover IP 198.51.100.11 (region eu-central, fleet kura-ovh): no candidate is eligible in the "
        "cluster yet (a Ready, uncordoned Node with a Ready peer-demux pod of the region); placing it by "
        "the deploy-time rule, and the watcher moves it once one is"
    ) in caplog.messages


def test_an_unreachable_cluster_falls_back_without_waiting_on_it_or_naming_it(
    vendorsim: Vendorsim, kube_cluster: KubeCluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The admin kubeconfig, its server moved to a port nothing listens on.
    kubeconfig = kube_cluster.kubeconfig.read_text().replace(kube_cluster.api_server, "https://127.0.0.1:9")
    caplog.set_level(logging.INFO, logger="providers.failover")
    provider = cluster_provider(vendorsim, kube_cluster, kubeconfig)
    created = provider.create(in_cluster(props(OVH, OVH.unrouted_ip, [OVH.high, OVH.low]), "p", namespace))
    assert created.outs["routed_to"] == OVH.low
    assert audit(vendorsim) == [OVH.write(OVH.unrouted_ip, OVH.low)]
    assert (
        "failover IP 198.51.100.11 (region eu-central, fleet kura-ovh): eligibility is the deploy-time "
        "rule (the cluster did not answer (MaxRetryError))"
    ) in caplog.messages
    assert "127.0.0.1:9" not in caplog.text


def test_a_change_of_pool_or_namespace_alone_moves_nothing(
    vendorsim: Vendorsim, kube_cluster: KubeCluster, namespace: str, pool: str
) -> None:
    olds = {**in_cluster(props(OVH, OVH.routed_ip, [OVH.low]), pool, namespace), "routed_to": OVH.low}
    diff = cluster_provider(vendorsim, kube_cluster).diff(OVH.routed_ip, olds, {**olds, "node_pool": "other"})
    assert diff.changes is False
